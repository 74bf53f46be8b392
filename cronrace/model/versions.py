"""The versions ``cronrace --version`` prints: the package's and its protocol's.

The package's version is written here once (hatch reads it for the metadata, and
``cronrace.__version__`` is this one). The PostgreSQL store's schema has its version in
its migration files (``cronrace db upgrade``). The protocol's is neither:
it names what the nodes of one namespace must agree on to share it (the keys and rows a
decision reads and writes, the requests and replies of a claim, a decision, a renewal and
a release). Nodes of two protocol versions must not race in one namespace; a release that
changes the protocol raises this number and says so in the changelog.
"""

from __future__ import annotations

#: The package's version (PEP 440); a 0.x minor release may break the API (CONTRIBUTING.md).
__version__ = "0.1.0"

#: Raised by every change to what the nodes of one namespace must agree on: 1 the
#: watermark, 2 the dense cursor (a Redis namespace records it in ``<ns>:protocol``; a
#: PostgreSQL schema's version says it: 24).
PROTOCOL_VERSION = 2
