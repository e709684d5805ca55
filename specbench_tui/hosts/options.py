"""How hosts are reached beyond what the plan says: the command line's options for the
backends (today the SSH client's config file), carried through the engine as one value so that
the engine and the console pass them on without naming any backend."""

from __future__ import annotations

import argparse
from dataclasses import dataclass


@dataclass(frozen=True)
class HostOptions:
    ssh_config: str | None = None  # like ``ssh -F FILE``; None: ~/.ssh/config

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--ssh-config",
            metavar="FILE",
            help="SSH client config instead of ~/.ssh/config (like ssh -F)",
        )

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> HostOptions:
        return cls(ssh_config=args.ssh_config)

    def argv(self) -> list[str]:
        """The options as a command line that ``add_arguments`` reads back (a child engine's)."""
        return ["--ssh-config", self.ssh_config] if self.ssh_config else []
