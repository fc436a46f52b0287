"""The `vfl` command: prepare data, simulate, predict, benchmark."""
