"""sandbox-supervisor: the daemon that runs inside every sandbox container, and its client."""

__version__ = "0.1.0"
SERVER_NAME = f"sandbox-supervisor/{__version__}"
