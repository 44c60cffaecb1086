"""The safe YAML loader of spec, reference and set-up files (used by :mod:`.loader`).

PyYAML's SafeLoader with limits: no nesting deeper than MAX_DEPTH, aliases that add no more
than MAX_NODES values once expanded (a "billion laughs" document fails after counting its
nodes, not after expanding them; a long file without aliases is bounded by its size alone), no key given twice in a mapping, no ``.inf``/``.nan``;
``1e12`` reads as a float. A module of its own so that a prediction whose specs are cached
(:mod:`.cache`) never imports PyYAML.
"""

from __future__ import annotations

import math
import re

import yaml

from ..errors import short
from .loader import MAX_DEPTH, MAX_NODES


class _Limits:
    """What :class:`_Loader` adds to PyYAML's safe composer and constructor: it also reads
    ``1e12`` / ``376.0e12`` as floats (YAML 1.1 wants ``1.0e+12``), and refuses what no spec
    file needs: nesting deeper than MAX_DEPTH, aliases that expand to more than MAX_NODES
    nodes, a key given twice in one mapping, and ``.inf``/``.nan``."""

    def _start_limits(self):
        self._depth = 0
        self._sizes: dict[int, int] = {}
        self._expanded = 0  # values the aliases add once expanded (a file's own values are bounded by its size)

    def compose_node(self, parent, index):
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise yaml.composer.ComposerError(None, None, f"nested deeper than {MAX_DEPTH} levels", self.peek_event().start_mark)
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if id(node) in self._sizes:  # an alias: the node again, with every value under it
            self._expanded += self._sizes[id(node)]
            if self._expanded > MAX_NODES:
                raise yaml.composer.ComposerError(None, None, f"its aliases expand to more than {MAX_NODES:,} values "
                                                  f"(an alias bomb?)", node.start_mark)
        else:
            children = node.value if isinstance(node, yaml.SequenceNode) else \
                [n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode) else []
            self._sizes[id(node)] = 1 + sum(self._sizes.get(id(c), 1) for c in children)
        return node

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    if key in seen:
                        raise yaml.constructor.ConstructorError(
                            None, None, f"key {short(key, 40)!r} given twice (first at line {seen[key]})", key_node.start_mark)
                    seen[key] = key_node.start_mark.line + 1
                except TypeError:
                    continue  # an unhashable key: the base class names it
        return super().construct_mapping(node, deep)

    def construct_yaml_int(self, node):
        try:
            return super().construct_yaml_int(node)
        except ValueError:  # `!!int 1.5`, or more digits than Python converts (4,300)
            raise yaml.constructor.ConstructorError(None, None, f"{short(node.value, 20)} is not a readable integer",
                                                    node.start_mark) from None

    def construct_yaml_float(self, node):
        try:
            value = super().construct_yaml_float(node)
        except ValueError:  # `!!float abc`
            raise yaml.constructor.ConstructorError(None, None, f"{short(node.value, 20)} is not a readable number",
                                                    node.start_mark) from None
        if not math.isfinite(value):
            raise yaml.constructor.ConstructorError(None, None, f"{short(node.value, 20)} is not a finite number", node.start_mark)
        return value


class _Loader(_Limits, yaml.SafeLoader):
    """PyYAML's SafeLoader, all in Python, with :class:`_Limits`."""

    def __init__(self, stream):
        super().__init__(stream)
        self._start_limits()


_Loader.add_constructor("tag:yaml.org,2002:float", _Loader.construct_yaml_float)
_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_yaml_int)
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
        |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


class _ValueLoader(_Loader):
    """The loader of one ``--set``/``--with`` value: YAML 1.2's core schema for plain scalars
    (decimal integers and floats, true/false, null; .inf/.nan refused as in files), not YAML
    1.1's: ``1:30`` (sexagesimal 90), ``0x10``, ``0o17``, ``1_000`` and ``yes``/``on`` stay
    strings, which the schema then refuses where a number or a flag is due."""

    yaml_implicit_resolvers: dict = {}


for _tag, _pattern, _first in (
        ("tag:yaml.org,2002:bool", r"^(?:true|True|TRUE|false|False|FALSE)$", "tTfF"),
        ("tag:yaml.org,2002:int", r"^[-+]?[0-9]+$", "-+0123456789"),
        ("tag:yaml.org,2002:float", r"^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?$", "-+0123456789."),
        ("tag:yaml.org,2002:float", r"^(?:[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$", "-+."),
        ("tag:yaml.org,2002:null", r"^(?:~|null|Null|NULL|)$", ["~", "n", "N", ""])):
    _ValueLoader.add_implicit_resolver(_tag, re.compile(_pattern), list(_first))


if getattr(yaml, "__with_libyaml__", False):
    class _EventLoader(_Limits, yaml.composer.Composer, yaml.cyaml.CParser, yaml.constructor.SafeConstructor,
                       yaml.resolver.Resolver):
        """:class:`_Loader` reading libyaml's events: libyaml scans and parses (in C, ~3x
        faster on a long file), and PyYAML's own composer builds the nodes from its events, so
        that the depth and alias limits (:class:`_Limits`) hold as they do in Python; the same
        resolvers and constructors as :class:`_Loader` (its class tables are shared)."""

        yaml_implicit_resolvers = _Loader.yaml_implicit_resolvers
        yaml_constructors = _Loader.yaml_constructors
        yaml_multi_constructors = _Loader.yaml_multi_constructors

        def __init__(self, stream):
            yaml.cyaml.CParser.__init__(self, stream)
            yaml.constructor.SafeConstructor.__init__(self)
            yaml.resolver.Resolver.__init__(self)
            yaml.composer.Composer.__init__(self)
            self._start_limits()
else:  # a PyYAML built without libyaml
    _EventLoader = _Loader
