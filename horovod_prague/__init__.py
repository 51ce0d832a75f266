"""Prague's Partial All-Reduce for Horovod.

Use the framework packages, as with Horovod: ``import horovod_prague.torch as hvd``.
"""

__version__ = "0.1.0"
