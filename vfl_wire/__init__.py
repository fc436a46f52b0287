"""The gRPC wire layer shared by vfl-client and vfl-coordinator.

- `vfl_wire.v1`: code generated from `proto/vfl_wire/v1/vfl.proto` (regenerate with
  `python -m vfl_wire.codegen`; never edit by hand).
- `vfl_wire.tensors`: numpy arrays <-> `Tensor` messages, with validation.
- `vfl_wire.convert`: proto <-> `vfl_core.protocol` conversion, one name for the converters of
  each message family (`convert_fields`, `convert_party`, `convert_psi`, `convert_coordinator`).
- `vfl_wire.records`: a method's Step record <-> proto, checked against the step's schema.
- `vfl_wire.channels`: message size cap, channel/server options, server and channel factories.

vfl_core never imports this package.
"""
