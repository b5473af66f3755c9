"""Where each rank's DCP files go under the checkpoint path: the S3 connector's prefix
strategies, producing the same names (so either library reads the other's checkpoints).

A strategy maps a rank to the start of its file names; torch appends ``{n}.distcp``:

- :class:`DefaultPrefixStrategy`: ``__{rank}_`` (torch's own layout).
- :class:`BinaryPrefixStrategy`, :class:`HexPrefixStrategy`: ``{p}/[epoch_{e}/]__{rank}_``
  with ``p`` the number ``rank % prefix_count`` written in base 2 or 16, zero-padded to
  ``min_prefix_length`` and reversed, so that consecutive ranks differ in the first character
  (S3 scales request rates per key prefix).
- :class:`RoundRobinPrefixStrategy`: ``{user_prefixes[rank % n]}/[epoch_{e}/]__{rank}_``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod


class S3PrefixStrategyBase(ABC):
    """A rule giving each rank the prefix of its file names; call it with the rank."""

    def __init__(self) -> None:
        pass

    def __call__(self, rank: int) -> str:
        return self.generate_prefix(rank)

    @abstractmethod
    def generate_prefix(self, rank: int) -> str:
        """The start of ``rank``'s file names, relative to the checkpoint path."""


class DefaultPrefixStrategy(S3PrefixStrategyBase):
    """``__{rank}_``: every file directly under the checkpoint path."""

    def generate_prefix(self, rank: int) -> str:
        return f"__{rank}_"


def _epoch_folder(epoch_num: int | None) -> str:
    return f"epoch_{epoch_num}/" if epoch_num is not None else ""


class NumericPrefixStrategy(S3PrefixStrategyBase):
    """Ranks spread over ``prefix_count`` folders named by reversed, zero-padded numbers in
    ``base``; ``prefix_count`` defaults to the process group's world size (1 without one)."""

    def __init__(self, base: int, epoch_num: int | None = None, min_prefix_length: int = 10,
                 prefix_count: int | None = None) -> None:
        if min_prefix_length < 1:
            raise ValueError(f"Minimum prefix length must be positive, got {min_prefix_length}")
        if epoch_num is not None and not isinstance(epoch_num, int):
            raise ValueError(f"Epoch number must be None or an integer, got {epoch_num}")
        if prefix_count is not None and (not isinstance(prefix_count, int) or prefix_count < 1):
            raise ValueError(f"Prefix count must be a positive integer, got {prefix_count}")
        super().__init__()
        self.base = base
        self.epoch_num = epoch_num
        self.min_prefix_len = min_prefix_length
        self.prefix_count = prefix_count if prefix_count is not None else _world_size()
        self.prefix_map = self._generate_prefix_map()

    def generate_prefix(self, rank: int) -> str:
        folder = self.prefix_map[rank % len(self.prefix_map)]
        return f"{folder}/{_epoch_folder(self.epoch_num)}__{rank}_"

    def _generate_prefix_map(self) -> list[str]:
        length = max(self._calculate_prefix_length(), self.min_prefix_len)
        return [self._format_number(i, length)[::-1] for i in range(self.prefix_count)]

    def _calculate_prefix_length(self) -> int:
        """Digits needed to tell ``prefix_count`` folders apart."""
        length, size = 1, self.base
        while size < self.prefix_count:
            length += 1
            size *= self.base
        return length

    @abstractmethod
    def _format_number(self, number: int, length: int) -> str:
        """``number`` in this strategy's base, zero-padded to ``length`` digits."""


class BinaryPrefixStrategy(NumericPrefixStrategy):
    """Folders named in base 2 (``0000``, ``1000``, ``0100``… for ranks 0, 1, 2)."""

    def __init__(self, epoch_num: int | None = None, min_prefix_length: int = 10,
                 prefix_count: int | None = None) -> None:
        super().__init__(2, epoch_num, min_prefix_length, prefix_count)

    def _format_number(self, number: int, length: int) -> str:
        return format(number, f"0{length}b")


class HexPrefixStrategy(NumericPrefixStrategy):
    """Folders named in base 16 (``0000``, ``1000``… ``f000``, ``0100``…)."""

    def __init__(self, epoch_num: int | None = None, min_prefix_length: int = 10,
                 prefix_count: int | None = None) -> None:
        super().__init__(16, epoch_num, min_prefix_length, prefix_count)

    def _format_number(self, number: int, length: int) -> str:
        return format(number, f"0{length}x")


class RoundRobinPrefixStrategy(S3PrefixStrategyBase):
    """Ranks dealt over ``user_prefixes`` in turn."""

    def __init__(self, user_prefixes: list[str], epoch_num: int | None = None) -> None:
        super().__init__()
        if not user_prefixes:
            raise ValueError("user_prefixes must not be empty")
        self.user_prefixes = user_prefixes
        self.epoch_num = epoch_num

    def generate_prefix(self, rank: int) -> str:
        folder = self.user_prefixes[rank % len(self.user_prefixes)]
        return f"{folder}/{_epoch_folder(self.epoch_num)}__{rank}_"


def _world_size() -> int:
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


__all__ = [
    "BinaryPrefixStrategy",
    "DefaultPrefixStrategy",
    "HexPrefixStrategy",
    "NumericPrefixStrategy",
    "RoundRobinPrefixStrategy",
    "S3PrefixStrategyBase",
]
