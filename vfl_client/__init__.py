"""vfl-client: one party of the federation, serving the `Party` gRPC service."""
