"""Generated code for the `vfl.v1` protobuf package. Do not edit; see `vfl_wire.codegen`."""
