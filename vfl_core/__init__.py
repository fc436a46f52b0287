"""Transport-free LASER-VFL: data blocks, models, the LASER math, parties and the round engine.

Nothing in this package imports gRPC or the client/coordinator packages.
"""
