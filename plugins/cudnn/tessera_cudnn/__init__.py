"""tessera-cudnn: cuDNN and cuBLASLt library calls as Tessera backends on the ``cuda`` device."""

__version__ = "0.1.0"
