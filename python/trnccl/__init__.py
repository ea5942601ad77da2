"""trnccl: collective communication for AWS Trainium clusters.

``import trnccl.torch`` registers the torch.distributed backend ``"trnccl"`` and provides
``trnccl.torch.TokenSwitch`` (MoE dispatch and combine).
"""

__version__ = "0.1.0"
