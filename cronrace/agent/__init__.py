"""The agent: the facade that registers jobs, its lifecycle, the control reader."""
