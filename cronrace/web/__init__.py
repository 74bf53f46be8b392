"""What a node serves over HTTP: Prometheus metrics, probes, the status page."""
