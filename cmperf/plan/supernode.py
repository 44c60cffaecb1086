"""The supernode as a parameter (paper Table 11, docs/model.md §9.7).

A supernode of N NPUs is N / 8 nodes. Each node's 7 L1 UB switch chips (one per sub-plane)
have 16 uplinks; in each of the 7 sub-planes the L2 tier must terminate nodes x 16 links on
chips of 48 ports, and L2 chips come in pairs (a logical switch is two physical chips):

    L2 chips per sub-plane   c = 2 ceil(ceil(nodes x uplinks / ports) / 2)
    logical switches         7 x c / 2
    port utilisation         nodes x uplinks / (c x ports)

which gives Table 11's 56 / 56 / 42 / 42 / 28 switches and 100 / 92 / 100 / 89 / 100 % for
384 / 352 / 288 / 256 / 192 NPUs. A smaller supernode is a smaller UB domain: expert
parallelism and the UB KV transfer stop at its edge (the planner's shapes respect it).
"""

from __future__ import annotations

import math

from ..errors import ConfigError

CHIPS_PER_LOGICAL_SWITCH = 2  # paper Table 11: "each logical switch consists of two physical switch chips"


def ub_switches(hw, npus: int) -> dict:
    """L2 switches and their port utilisation for a supernode of ``npus`` NPUs."""
    f = hw.system.ub_fabric
    if f is None:
        raise ConfigError(f"system {hw.system.name} describes no UB switch fabric (`ub_fabric`)")
    per_node = hw.system.node.chips
    if npus % per_node:
        raise ConfigError(f"--supernode {npus}: expected a multiple of the {per_node} NPUs of a node")
    nodes = npus // per_node
    links = nodes * f.l1_uplink_links
    chips = CHIPS_PER_LOGICAL_SWITCH * math.ceil(math.ceil(links / f.l2_ports_per_chip) / CHIPS_PER_LOGICAL_SWITCH)
    if chips > f.l2_chips_per_subplane:
        raise ConfigError(f"--supernode {npus}: needs {chips} L2 chips per sub-plane; the fabric has "
                          f"{f.l2_chips_per_subplane} (at most {f.l2_chips_per_subplane * f.l2_ports_per_chip // f.l1_uplink_links * per_node} NPUs)")
    return {"npus": npus, "nodes": nodes, "l2_chips_per_subplane": chips,
            "logical_switches": f.l2_subplanes * chips // CHIPS_PER_LOGICAL_SWITCH,
            "port_utilisation": links / (chips * f.l2_ports_per_chip)}


def supernode_sets(hw, npus: int) -> list[str]:
    """``--set`` overrides that make the system a supernode of ``npus`` NPUs: its nodes and
    the domain of the tier expert parallelism runs over (UB on CloudMatrix384)."""
    per_node = hw.system.node.chips
    if npus < per_node or npus % per_node:
        raise ConfigError(f"--supernode {npus}: expected a multiple of the {per_node} NPUs of a node")
    if hw.system.ub_fabric is not None:
        ub_switches(hw, npus)  # the fabric must be able to build it (Table 11's switches)
    sets = [f"system.nodes={npus // per_node}"]
    domain = hw.system.expert_parallel.decode.tiers[-1]  # the scale-up tier expert parallelism runs over
    if hw.system.tiers[domain].domain_chips is not None:
        sets.append(f"system.tiers.{domain}.domain_chips={npus}")
    return sets
