"""The gRPC wire layer shared by vfl-client and vfl-coordinator.

- `vfl_wire.v1`: code generated from `proto/vfl_wire/v1/vfl.proto` (regenerate with
  `python -m vfl_wire.codegen`; never edit by hand).
- `vfl_wire.tensors`: numpy arrays <-> `Tensor` messages, with validation.
- `vfl_wire.convert`: the one proto <-> `vfl_core.protocol` conversion module.
- `vfl_wire.channels`: message size cap, channel/server options, server and channel factories.

vfl_core never imports this package.
"""
