"""vfl-coordinator: registration, alignment, rounds with deadlines, inference, over gRPC."""
