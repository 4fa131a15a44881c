"""The Slurm side of health: what a node record tells the sweep (address, state, reason)."""

import json
from pathlib import Path

from slurmkit.slurm import parsers

DATA = Path(__file__).parent / "data" / "probe"


def test_node_records_keep_the_address_slurmctld_uses():
    # Recorded `scontrol show node` of the local clusters: NodeAddr is where
    # the sweep's SSH goes (it differs from the node's name there).
    text = json.loads((DATA / "gamma-22.05.json").read_text())["stdout"]
    nodes = {n.name: n for n in parsers.parse_nodes(text)}
    assert nodes["gn1"].addr == "127.0.3.11" and nodes["gn2"].addr == "127.0.3.12"
    assert parsers.parse_nodes("NodeName=x State=IDLE")[0].addr == ""
