"""The learning algorithms: the LASER objective, one MethodSpec per method (the registry), and the
round programs of DVFL and the latent-variable VFL."""
