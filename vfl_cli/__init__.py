"""The `vfl` command: prepare data, simulate, predict, benchmark."""

import os

# grpc's C core writes a line to stderr for every connection whose TLS handshake fails (INFO:
# "Handshake failed with error SSL_ERROR_SSL ..."), before any code of ours sees the connection
# and outside the log budget (vfl_wire/log_budget.py): in a measured attack, 51,469 connections of
# garbage bytes in 8 s, no certificate needed, wrote 11 MB to a serving party's log. grpc reads
# this once, when it is first imported, so every command (each is in this package) sets it here,
# before any imports grpc. Its errors still show; an operator's own GRPC_VERBOSITY wins.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
