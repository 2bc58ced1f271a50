"""Write ``docs/api/``, the API reference, from the code: one page per public area.

    python -m tools.apiref           # rewrite docs/api/*.md
    python -m tools.apiref --check   # exit 1 (and say so) when a page is stale

What the reference holds, and what ``tests/meta/test_api_reference.py`` keeps true:

* one page per public area (``AREAS``: containers, tensorclass, persistence, ...) and an
  index; private modules are never named (their docstrings, where a public name's
  docstring points to them, are folded under that name);
* docstrings rendered as what they are: reST code markup, Sphinx roles, ``text::``
  literal blocks, Google-style sections and lists become their Markdown, and ``<`` in
  prose is escaped (``render_doc``; ``tests/meta/test_site.py`` checks the built HTML);

* every name in the ``__all__`` of the public modules (``MODULES``), documented once,
  in the module that defines it when that module is public, otherwise in the first
  public module exporting it; other modules exporting it link there;
* for a class, every public member (a name without a leading ``_``) defined by any
  class of its MRO that lives in ``tensorbox``: so ``TensorDict`` and ``TensorClass``
  list what they inherit from the container base, while members inherited from
  ``torch.Tensor``, ``nn.Module`` or ``Exception`` are left to their own docs. A
  subclass of the container base other than these two lists only what it adds;
* each with its ``inspect.signature`` (sentinel defaults shown by their name, so the
  page is the same on every run) and its docstring. Docstring examples (``>>>``)
  become ``pycon`` blocks: they already run as doctests of their module, and
  ``tests/meta/test_docs.py`` executes only ``python`` blocks.

Only the standard library is used: no documentation generator to install.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib
import inspect
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import MemberDescriptorType, ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "docs" / "api"
PACKAGE = ROOT / "tensorbox"

#: The public modules, in the order the page presents them.
MODULES = (
    "tensorbox",
    "tensorbox.weights",
    "tensorbox.distributed",
    "tensorbox.data",
    "tensorbox.data.transforms",
    "tensorbox.buffer",
    "tensorbox.progress",
    "tensorbox.errors",
)

#: Classes that list every member they inherit from the container base.
FULL_CONTAINERS = ("TensorDict", "TensorClass")

#: Public names whose runnable example is a doc page rather than a doctest (they need
#: processes or a process group): qualified name -> (page, what its ``python`` blocks use).
EXAMPLES_ELSEWHERE: dict[str, tuple[str, str]] = {
    "tensorbox.PersistentTensorDict": ("interop.md", "tensorbox.PersistentTensorDict"),
    "tensorbox.from_csv": ("interop.md", "from_csv("),
    "tensorbox.from_h5": ("interop.md", "from_h5("),
    "tensorbox.from_json": ("interop.md", "from_json("),
    "tensorbox.from_parquet": ("interop.md", "from_parquet("),
    "tensorbox.from_safetensors": ("interop.md", "from_safetensors("),
    "tensorbox.from_zarr": ("interop.md", "from_zarr("),
    "tensorbox.to_safetensors": ("interop.md", "to_safetensors("),
    "tensorbox.BatchLoader": ("data.md", "BatchLoader("),
    "tensorbox.TensorDictStore": ("remote.md", "TensorDictStore("),
    "tensorbox.buffer.RedisAugmentBuffer": ("buffer.md", "RedisAugmentBuffer("),
    "tensorbox.buffer.run_producer": ("buffer.md", "target=run_producer"),
    "tensorbox.LazyStackedTensorDictStore": (
        "remote.md",
        "LazyStackedTensorDictStore.from_lazy_stack(",
    ),
    "tensorbox.data.ingest_image_folder": ("data.md", "ingest_image_folder("),
    "tensorbox.buffer.AugmentBuffer": ("buffer.md", "AugmentBuffer("),
    "tensorbox.buffer.BufferStats": ("buffer.md", ".stats()"),
    "tensorbox.buffer.ProducerError": ("buffer.md", "ProducerError"),
    "tensorbox.distributed.DistributedError": ("distributed.md", "tbd.DistributedError"),
    "tensorbox.distributed.Request": ("distributed.md", "req.wait("),
    "tensorbox.distributed.StructureMismatchError": ("distributed.md", "StructureMismatchError"),
    "tensorbox.distributed.all_gather": ("distributed.md", "tbd.all_gather("),
    "tensorbox.distributed.all_reduce_": ("distributed.md", "tbd.all_reduce_("),
    "tensorbox.distributed.broadcast": ("distributed.md", "tbd.broadcast("),
    "tensorbox.distributed.broadcast_": ("distributed.md", "tbd.broadcast_("),
    # from_remote_init is recv_structure, init_remote and send_structure are send.
    "tensorbox.distributed.from_remote_init": ("distributed.md", "tbd.recv_structure("),
    "tensorbox.distributed.init_remote": ("distributed.md", "tbd.send("),
    "tensorbox.distributed.irecv": ("distributed.md", "tbd.irecv("),
    "tensorbox.distributed.isend": ("distributed.md", "tbd.isend("),
    "tensorbox.distributed.recv": ("distributed.md", "tbd.recv("),
    "tensorbox.distributed.recv_structure": ("distributed.md", "tbd.recv_structure("),
    "tensorbox.distributed.send": ("distributed.md", "tbd.send("),
    "tensorbox.distributed.send_structure": ("distributed.md", "tbd.send("),
    "tensorbox.distributed.shard_indices": ("distributed.md", "tbd.shard_indices("),
}

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


@dataclasses.dataclass(frozen=True)
class Member:
    """One public member of a class, ready to render."""

    name: str
    kind: str  # method, classmethod, staticmethod, property, attribute
    signature: str
    doc: str


@dataclasses.dataclass(frozen=True)
class Entry:
    """One public name of a module: a class, a function, a module or a data value."""

    module: str
    name: str
    obj: Any

    @property
    def qualname(self) -> str:
        return f"{self.module}.{self.name}"


# --------------------------------------------------------------------------- collecting


def _modules() -> list[ModuleType]:
    return [importlib.import_module(name) for name in MODULES]


def _home(obj: Any, exporters: list[str]) -> str:
    """The one module whose section documents ``obj``."""
    defined = getattr(obj, "__module__", None) if not isinstance(obj, ModuleType) else None
    return defined if defined in exporters else exporters[0]


def entries() -> tuple[list[Entry], dict[str, list[tuple[str, str]]]]:
    """The documented entries, and per module the names it re-exports (name, home module)."""
    exporters: dict[int, list[str]] = {}
    objects: dict[int, Any] = {}
    for module in _modules():
        for name in module.__all__:
            obj = getattr(module, name)
            if isinstance(obj, ModuleType):
                continue  # a public submodule has its own section
            exporters.setdefault(id(obj), []).append(module.__name__)
            objects[id(obj)] = obj
    documented: list[Entry] = []
    reexports: dict[str, list[tuple[str, str]]] = {m: [] for m in MODULES}
    for module in _modules():
        for name in module.__all__:
            obj = getattr(module, name)
            if isinstance(obj, ModuleType):
                reexports[module.__name__].append((name, obj.__name__))
                continue
            home = _home(obj, exporters[id(obj)])
            if home == module.__name__:
                documented.append(Entry(module.__name__, name, obj))
            else:
                reexports[module.__name__].append((name, f"{home}.{name}"))
    return documented, reexports


def _is_container_subclass(cls: type) -> bool:
    from tensorbox._core.container import TensorCollection

    return issubclass(cls, TensorCollection) and cls.__name__ not in FULL_CONTAINERS


def _field_names(cls: type) -> list[str]:
    if dataclasses.is_dataclass(cls):
        return [f.name for f in dataclasses.fields(cls)]
    return list(getattr(cls, "_fields", ()))  # a NamedTuple


def _slot_names(cls: type) -> list[str]:
    """Public ``__slots__`` attributes (they cannot carry a docstring: the class's says)."""
    return sorted(
        name
        for klass in _owners(cls)
        for name, value in vars(klass).items()
        if not name.startswith("_") and isinstance(value, MemberDescriptorType)
    )


def _owners(cls: type) -> Iterator[type]:
    """The classes of ``cls``'s MRO whose members the reference lists, base first."""
    skip: set[type] = set()
    if _is_container_subclass(cls):
        import tensorbox
        from tensorbox._core.container import TensorCollection

        skip = {*TensorCollection.__mro__, tensorbox.TensorClass, tensorbox.TensorDict}
    for klass in reversed(cls.__mro__):
        if klass not in skip and (klass.__module__ or "").startswith("tensorbox"):
            yield klass


def public_members(cls: type) -> dict[str, Any]:
    """Public member name -> the raw attribute (as found in the defining class's dict)."""
    fields = {*_field_names(cls), *_slot_names(cls)}
    found: dict[str, Any] = {}
    for klass in _owners(cls):
        for name, value in vars(klass).items():
            if not name.startswith("_") and name not in fields:
                found[name] = value
    return dict(sorted(found.items()))


def raw_doc(value: Any) -> str:
    """The docstring written for ``value`` itself (not one inherited from elsewhere)."""
    if isinstance(value, classmethod | staticmethod):
        value = value.__func__
    if isinstance(value, property):
        doc = value.__doc__ or (value.fget.__doc__ if value.fget else None)
    elif callable(value) or type(value).__name__ == "_tuplegetter":
        doc = value.__doc__
    else:
        doc = None
    return inspect.cleandoc(doc) if doc else ""


def undocumented() -> list[str]:
    """Qualified names of public names and members whose docstring is empty."""
    missing = []
    documented, _ = entries()
    for entry in documented:
        if not _entry_doc(entry):
            missing.append(entry.qualname)
        if inspect.isclass(entry.obj):
            for name, value in public_members(entry.obj).items():
                if not raw_doc(value):
                    missing.append(f"{entry.qualname}.{name}")
    return missing


def _attribute_docs() -> dict[str, tuple[str, str]]:
    """Module-level ``NAME = value`` documented by the string after it (or ``#:`` lines
    before it): name -> (source of the assignment, docstring)."""
    found: dict[str, tuple[str, str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        lines = source.splitlines()
        body = ast.parse(source).body
        for stmt, after in zip(body, [*body[1:], None]):
            target = None
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
                target = stmt.targets[0]
            elif isinstance(stmt, ast.AnnAssign):
                target = stmt.target
            if not isinstance(target, ast.Name):
                continue
            doc = ""
            if (
                isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                doc = inspect.cleandoc(after.value.value)
            else:
                comments = []
                row = stmt.lineno - 2
                while row >= 0 and lines[row].lstrip().startswith("#:"):
                    comments.insert(0, lines[row].lstrip()[2:].strip())
                    row -= 1
                doc = " ".join(comments)
            if doc:
                code = ast.get_source_segment(source, stmt) or target.id
                found.setdefault(target.id, (code, doc))
    return found


def _entry_doc(entry: Entry) -> str:
    if inspect.isclass(entry.obj) or callable(entry.obj):
        return raw_doc(entry.obj)
    return _attribute_docs().get(entry.name, ("", ""))[1]


# --------------------------------------------------------------------------- signatures


class _Text:
    """Shows as the given text inside a rendered signature (no quotes added)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _show_default(value: Any, names: dict[str, Any]) -> Any:
    text = repr(value)
    if not _ADDRESS.search(text):
        return value
    # A sentinel object: show the module-level name it is bound to, never its address.
    for name, candidate in names.items():
        if candidate is value:
            return _Text(name)
    return _Text(_ADDRESS.sub("", text))


def _show_annotation(annotation: Any) -> Any:
    """A string annotation shown as written, less `builtins.` (a guard against shadowing)."""
    if annotation is inspect.Parameter.empty or not isinstance(annotation, str):
        return annotation
    return _Text(annotation.replace("builtins.", ""))


def signature(obj: Callable[..., Any], *, drop_first: bool = False, is_class: bool = False) -> str:
    """``inspect.signature(obj)`` as text, or ``(...)`` where Python cannot tell it."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return "(...)"
    params = list(sig.parameters.values())
    if drop_first and params:
        params = params[1:]
    names = getattr(inspect.unwrap(obj), "__globals__", {})
    shown = [
        p.replace(
            annotation=_show_annotation(p.annotation),
            default=p.default if p.default is p.empty else _show_default(p.default, names),
        )
        for p in params
    ]
    returns = sig.empty if is_class else _show_annotation(sig.return_annotation)
    return str(sig.replace(parameters=shown, return_annotation=returns))


def member(name: str, value: Any, owner: type) -> Member:
    """Describe the member ``name`` of ``owner``, whose raw attribute is ``value``."""
    doc = raw_doc(value)
    if isinstance(value, property):
        ann = inspect.signature(value.fget).return_annotation if value.fget else None
        shown = "" if ann in (None, inspect.Signature.empty) else f": {_show_annotation(ann)!r}"
        kind = "property" if value.fset is None else "property, settable"
        return Member(name, kind, f"{name}{shown}", doc)
    if isinstance(value, classmethod):
        return Member(name, "classmethod", name + signature(getattr(owner, name)), doc)
    if isinstance(value, staticmethod):
        return Member(name, "staticmethod", name + signature(value.__func__), doc)
    if callable(value):
        return Member(name, "method", name + signature(value, drop_first=True), doc)
    return Member(name, "attribute", f"{name} = {value!r}", doc)


# --------------------------------------------------------------------------- pages


@dataclasses.dataclass(frozen=True)
class Area:
    """One page of the reference: a public area of the package."""

    slug: str  # the file name, docs/api/SLUG.md
    title: str  # the page's H1, nav title and browser title
    intro: str
    modules: tuple[str, ...] = ()  # public modules whose section is on this page
    homes: tuple[str, ...] = ()  # where the top-level names it documents are defined


#: The pages, in the order the site's nav lists them. A name exported by ``tensorbox``
#: goes to the first area whose ``homes`` prefixes the module that defines it, else to
#: ``containers``; a name of another public module goes to the area listing that module.
AREAS = (
    Area(
        "containers",
        "Containers API",
        "`TensorDict` and the other containers, stacking, padding and the global switches.",
    ),
    Area(
        "tensorclass",
        "Tensorclass API",
        "`@tensorclass`, `TensorClass` and their fields.",
        homes=("tensorbox._tensorclass",),
    ),
    Area(
        "persistence",
        "Saving and loading API",
        "`MemoryMappedTensor`, archives (`pack`, `unpack`), prefetching remote trees, and the "
        "progress reports of long saves. `memmap`, `save` and `load_memmap` are container "
        "methods: see [`TensorDict`](containers.md#tensorboxtensordict).",
        modules=("tensorbox.progress",),
        homes=("tensorbox._storage",),
    ),
    Area(
        "stores",
        "Remote stores API",
        "Containers whose leaves live in a Redis (or Redis-protocol) server.",
        homes=("tensorbox._redis",),
    ),
    Area(
        "weights",
        "Weights API",
        "Model weights as containers: `state_dict`, `from_module`, `to_module`.",
        modules=("tensorbox.weights",),
    ),
    Area(
        "data",
        "Data loading API",
        "The batch loader, image-folder datasets and batch transforms.",
        modules=("tensorbox.data", "tensorbox.data.transforms"),
        homes=("tensorbox.data",),
    ),
    Area(
        "buffer",
        "Augmentation buffer API",
        "Producers that augment batches ahead of training, in processes or through Redis.",
        modules=("tensorbox.buffer",),
    ),
    Area(
        "interop",
        "Interop API",
        "Bridges to Arrow, pandas, Parquet, CSV, JSON, HDF5, Zarr and safetensors.",
        homes=("tensorbox.interop",),
    ),
    Area(
        "distributed",
        "Distributed API",
        "Containers over `torch.distributed`: point to point, collectives, sharding.",
        modules=("tensorbox.distributed",),
    ),
    Area(
        "errors",
        "Errors API",
        "The exceptions tensorbox raises; each is also a built-in exception type.",
        modules=("tensorbox.errors",),
    ),
)

INDEX_TITLE = "API reference"


def area_of(entry: Entry) -> Area:
    """The page that documents ``entry``."""
    if entry.module != "tensorbox":
        return next(a for a in AREAS if entry.module in a.modules)
    defined = getattr(entry.obj, "__module__", None) or ""
    for area in AREAS:
        if any(defined == h or defined.startswith(h + ".") for h in area.homes):
            return area
    return AREAS[0]


def module_area(module: str) -> Area | None:
    """The page holding the section of a public module (None: ``tensorbox`` itself)."""
    return next((a for a in AREAS if module in a.modules), None)


# --------------------------------------------------------------------------- rendering


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.lower())
    return text.replace(" ", "-")


def _link(key: str) -> str:
    """A placeholder for the address of the heading registered as ``key`` (see ``_Site``)."""
    return f"@@{{{key}}}"


class _Page:
    """Lines of Markdown, with headings whose anchors links may name before they exist."""

    def __init__(self, name: str) -> None:
        self.name = name  # the file name inside docs/api/
        self.lines: list[str] = []
        self.headings: list[tuple[str, str | None]] = []  # (text, key), in page order

    def heading(self, level: int, text: str, key: str | None = None) -> None:
        self.lines += ["#" * level + " " + text, ""]
        self.headings.append((text, key))

    def anchors(self) -> dict[str, str]:
        """key -> anchor; GitHub numbers repeated anchors in page order ("x", "x-1")."""
        seen: dict[str, int] = {}
        found: dict[str, str] = {}
        for text, key in self.headings:
            base = slug(text)
            anchor = base if base not in seen else f"{base}-{seen[base]}"
            seen[base] = seen.get(base, 0) + 1
            if key is not None:
                found[key] = anchor
        return found


def _resolve(pages: list[_Page]) -> dict[str, str]:
    """The pages' text, each placeholder link made a link to its page and anchor."""
    where = {key: (page.name, anchor) for page in pages for key, anchor in page.anchors().items()}

    out: dict[str, str] = {}
    for page in pages:
        lines = list(page.lines)
        while lines and not lines[-1]:
            lines.pop()
        body = "\n".join(lines) + "\n"

        def address(match: re.Match[str], here: str = page.name) -> str:
            name, anchor = where[match.group(1)]
            return f"#{anchor}" if name == here else f"{name}#{anchor}"

        out[page.name] = re.sub(r"@@\{([^}]*)\}", address, body)
    return out


_ROLE = re.compile(r":(?:meth|func|class|data|attr|mod|obj|exc):`~?([^`]+)`")
#: Google-style sections whose indented lines are ``name: text`` items.
_SECTIONS = re.compile(
    r"^(Args|Arguments|Parameters|Keyword Args|Keyword Arguments|Other Parameters"
    r"|Returns|Yields|Raises|Attributes):$"
)
_ITEM = re.compile(r"^(\*{0,2}[\w.]+(?:, \*{0,2}[\w.]+)*)(?: \(([^)]*)\))?: (.*)$")
_LIST_ITEM = re.compile(r"^\s*(?:[-*+] |\d+[.)] )")
#: A code span of reST (double backticks) or Markdown (single): kept apart from the text.
_SPAN = re.compile(r"``(.+?)``|`([^`]+)`")


def inline(text: str) -> str:
    """One line of docstring prose as Markdown: reST's ``code`` and Sphinx roles become
    Markdown code spans, and ``<`` outside them is escaped, so ``root/<class>`` in prose
    is shown rather than read by the browser as a tag."""
    text = _ROLE.sub(r"`\1`", text)
    out: list[str] = []
    last = 0
    for match in _SPAN.finditer(text):
        out.append(text[last : match.start()].replace("<", "&lt;"))
        code = match.group(1) if match.group(1) is not None else match.group(2)
        out.append(f"`{code}`" if "`" not in code else f"`` {code} ``")
        last = match.end()
    out.append(text[last:].replace("<", "&lt;"))
    return "".join(out)


def _section(lines: list[str], i: int) -> tuple[list[str], int]:
    """A Google-style ``Args:`` section starting at ``lines[i]``, as a Markdown list."""
    out = [f"**{lines[i].strip()}**", ""]
    i += 1
    items: list[str] = []
    indent = None
    while i < len(lines) and (not lines[i].strip() or lines[i][:1] == " "):
        line = lines[i]
        i += 1
        if not line.strip():
            continue
        depth = len(line) - len(line.lstrip())
        indent = depth if indent is None else indent
        text = line.strip()
        match = _ITEM.match(text)
        if depth <= indent and match:
            name, kind, rest = match.groups()
            names = ", ".join(f"`{n}`" for n in name.split(", "))
            items.append(
                f"- {names}" + (f" ({inline(kind)})" if kind else "") + f": {inline(rest)}"
            )
        elif depth <= indent or not items:
            items.append(f"- {inline(text)}")
        else:
            items[-1] += " " + inline(text)
    return [*out, *items, ""], i


def _indented_block(lines: list[str], i: int, base: int) -> tuple[list[str], int]:
    """The lines from ``lines[i]`` indented deeper than ``base`` (blank lines included),
    dedented: the body of a reST literal block (``text::``)."""
    block: list[str] = []
    while i < len(lines) and (
        not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > base
    ):
        block.append(lines[i])
        i += 1
    while block and not block[-1].strip():
        block.pop()
        i -= 1
    return inspect.cleandoc("\n".join(block)).splitlines(), i


def _fence(out: list[str], language: str, body: list[str]) -> None:
    if out and out[-1]:
        out.append("")
    out += [f"```{language}", *body, "```", ""]


def render_doc(doc: str) -> list[str]:
    """Docstring text (reST-flavoured, Google-style sections) as Markdown.

    ``>>>`` examples become ``pycon`` fences and ``text::`` literal blocks ``text``
    fences; ``Args:``-like sections become lists; a list gets the blank line Markdown
    needs before it; other indented lines are dedented (Markdown would read them as
    code); ``code`` and roles become code spans and ``<`` in prose is escaped.
    """
    out: list[str] = []
    lines = doc.splitlines()
    in_list = False
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        depth = len(line) - len(stripped) if stripped else 0
        if _SECTIONS.match(line) and i + 1 < len(lines) and lines[i + 1][:1] == " ":
            if out and out[-1]:
                out.append("")
            section, i = _section(lines, i)
            out += section
            in_list = False
            continue
        if stripped.startswith(">>>"):
            block = []
            while i < len(lines) and lines[i].strip():
                block.append(lines[i])
                i += 1
            _fence(out, "pycon", inspect.cleandoc("\n".join(block)).splitlines())
            in_list = False
            continue
        if stripped.endswith("::") and not stripped.startswith(">>>"):
            body, after = _indented_block(lines, i + 1, depth)
            if any(b.strip() for b in body):
                intro = stripped[:-2].rstrip()
                if intro:
                    out.append(inline(intro + ("" if intro.endswith(":") else ":")))
                language = "pycon" if body[0].startswith(">>>") else "text"
                _fence(out, language, body)
                i, in_list = after, False
                continue
        if not stripped:
            out.append("")
            i += 1
            continue
        if _LIST_ITEM.match(line):
            if out and out[-1] and not in_list:
                out.append("")  # Markdown starts a list only after a blank line
            in_list = True
            out.append(inline(line))
        elif in_list and depth > 0:
            out.append("  " + inline(stripped))  # continues the list item
        else:
            if in_list and out and out[-1]:
                out.append("")  # a paragraph after a list, not a lazy continuation
            in_list = False
            text = inline(stripped)
            out.append("\\" + text if text.startswith("#") else text)
        i += 1
    cleaned: list[str] = []
    for line in out:  # no runs of blank lines
        if line or (cleaned and cleaned[-1]):
            cleaned.append(line)
    while cleaned and not cleaned[-1]:
        cleaned.pop()
    return [*cleaned, ""]


def _bases(cls: type) -> str:
    names = [b.__name__ for b in cls.__bases__ if b is not object]
    return f"({', '.join(names)})" if names else ""


def _pointer(entry: Entry) -> list[str]:
    if entry.qualname not in EXAMPLES_ELSEWHERE:
        return []
    doc_page = EXAMPLES_ELSEWHERE[entry.qualname][0]
    return [f"Runnable example: [{doc_page}](../{doc_page}).", ""]


def _render_class(page: _Page, entry: Entry, notes: list[str]) -> None:
    cls = entry.obj
    sig = "" if issubclass(cls, BaseException) else signature(cls, is_class=True)
    page.lines += [f"*class* `{entry.name}{_bases(cls)}`", ""]
    if sig:
        page.lines += [f"Constructor: `{entry.name}{sig}`", ""]
    page.lines += [*_doc(entry, notes), *_pointer(entry), *notes]
    fields = _field_names(cls)
    if fields:
        hints = getattr(cls, "__annotations__", {})
        shown = ", ".join(f"`{f}: {hints[f]}`" if f in hints else f"`{f}`" for f in fields)
        page.lines += [f"**Fields:** {shown}.", ""]
    slots = _slot_names(cls)
    if slots:
        shown = ", ".join(f"`{s}`" for s in slots)
        page.lines += [f"**Attributes** (described above): {shown}.", ""]
    if _is_container_subclass(cls):
        page.lines += [
            f"Also has every member of [`TensorClass`]({_link('tensorbox.TensorClass')}) "
            "(the container methods); only what it adds is listed here.",
            "",
        ]
    members = [member(n, v, cls) for n, v in public_members(cls).items()]
    if entry.name in FULL_CONTAINERS:
        page.lines += [
            f"{len(members)} public members, those inherited from the container base "
            "(`TensorCollection`) included:",
            "",
        ]
    for m in members:
        page.heading(4, f"`{entry.name}.{m.name}`", f"{entry.qualname}.{m.name}")
        page.lines += [f"*{m.kind}* `{m.signature}`", "", *render_doc(m.doc)]


def without_example() -> list[str]:
    """Public classes and functions with neither a ``>>>`` example nor a doc page one."""
    documented, _ = entries()
    return [
        e.qualname
        for e in documented
        if callable(e.obj) and ">>>" not in raw_doc(e.obj) and e.qualname not in EXAMPLES_ELSEWHERE
    ]


def _module_notes(entry: Entry, shown: set[str]) -> list[str]:
    """The docstring of the private module defining ``entry``, when the entry's docstring
    says "see the module docstring", once per module: folded under the entry, without the
    private module's name (the reference names public modules only)."""
    name = getattr(entry.obj, "__module__", None) or ""
    if "._" not in name or name in shown or "module doc" not in raw_doc(entry.obj):
        return []
    shown.add(name)
    doc = inspect.cleandoc(importlib.import_module(name).__doc__ or "")
    if not doc:
        return []
    # md_in_html (mkdocs.yml) renders the Markdown inside; GitHub does too.
    summary = f"<details markdown><summary>More about {entry.name}: how it works</summary>"
    return [summary, "", *render_doc(doc), "</details>", ""]


_MODULE_DOC = re.compile(r"\b(?:the\s+)?module\s+doc(?:string)?\b")


def _doc(entry: Entry, notes: list[str]) -> list[str]:
    """The entry's docstring; "see the module doc" points to the notes folded below it."""
    doc = raw_doc(entry.obj)
    if notes:
        doc = _MODULE_DOC.sub(f'"More about {entry.name}" below', doc)
    return render_doc(doc)


def _render_entry(page: _Page, entry: Entry, shown: set[str]) -> None:
    page.heading(3, f"`{entry.qualname}`", entry.qualname)
    obj = entry.obj
    notes = _module_notes(entry, shown)
    if inspect.isclass(obj):
        _render_class(page, entry, notes)
    elif callable(obj):
        page.lines += [f"*function* `{entry.name}{signature(obj)}`", "", *_doc(entry, notes)]
        page.lines += [*_pointer(entry), *notes]
    else:
        code, doc = _attribute_docs().get(entry.name, (f"{entry.name} = {obj!r}", ""))
        page.lines += ["```text", code, "```", "", *render_doc(doc)]


_GENERATED = "<!-- Generated by `python -m tools.apiref` from the code: do not edit by hand. -->"


def _reexports(page: _Page, module: str, reexports: dict[str, list[tuple[str, str]]]) -> None:
    if reexports[module]:
        links = ", ".join(f"[`{n}`]({_link(target)})" for n, target in reexports[module])
        page.lines += [f"Also exported here, documented elsewhere: {links}.", ""]


def _index(documented: list[Entry], reexports: dict[str, list[tuple[str, str]]]) -> _Page:
    page = _Page("index.md")
    page.heading(1, INDEX_TITLE)
    page.lines += [
        _GENERATED,
        "",
        "Every public name of tensorbox with its signature and its docstring, one page per",
        "area, generated from the code by `python -m tools.apiref`;",
        "`tests/meta/test_api_reference.py` fails when these pages and the code disagree.",
        "Examples (`>>>`) run as doctests of their module. Guides:",
        "[containers](../tensordict.md), [tensorclasses](../tensorclass.md),",
        "[saving and loading](../persistence.md); coming from tensordict:",
        "[migrating](../migrating.md).",
        "",
    ]
    page.heading(2, "Pages")
    for area in AREAS:
        names = [e for e in documented if area_of(e) is area]
        links = ", ".join(f"[`{e.name}`]({_link(e.qualname)})" for e in names)
        page.lines += [f"- [{area.title}]({area.slug}.md): {area.intro}", f"  {links}", ""]
    page.heading(2, "`tensorbox`", "tensorbox")
    page.lines += render_doc(inspect.cleandoc(importlib.import_module("tensorbox").__doc__ or ""))
    _reexports(page, "tensorbox", reexports)
    return page


def _area_page(
    area: Area,
    documented: list[Entry],
    reexports: dict[str, list[tuple[str, str]]],
    shown: set[str],
) -> _Page:
    page = _Page(f"{area.slug}.md")
    page.heading(1, area.title)
    page.lines += [_GENERATED, "", area.intro, "", f"Back to the [{INDEX_TITLE}](index.md).", ""]
    top = [e for e in documented if e.module == "tensorbox" and area_of(e) is area]
    if top:
        page.heading(2, "From `tensorbox`", f"tensorbox@{area.slug}")
        page.lines += ["Imported from the top-level package: `from tensorbox import ...`.", ""]
        for entry in top:
            _render_entry(page, entry, shown)
    for module in area.modules:
        page.heading(2, f"`{module}`", module)
        page.lines += render_doc(inspect.cleandoc(importlib.import_module(module).__doc__ or ""))
        _reexports(page, module, reexports)
        for entry in (e for e in documented if e.module == module):
            _render_entry(page, entry, shown)
    return page


def render() -> dict[str, str]:
    """The reference's pages, file name (inside ``docs/api/``) -> text."""
    documented, reexports = entries()
    shown: set[str] = set()  # private modules whose docstring is already on a page
    pages = [_index(documented, reexports)]
    pages += [_area_page(area, documented, reexports, shown) for area in AREAS]
    return _resolve(pages)


def counts() -> dict[str, int]:
    """How many public names and class members the reference documents."""
    documented, _ = entries()
    members = sum(len(public_members(e.obj)) for e in documented if inspect.isclass(e.obj))
    return {"names": len(documented), "members": members}


def stale(pages: dict[str, str]) -> list[str]:
    """The files of ``OUTPUT`` that differ from ``pages``, are missing, or are left over."""
    current = {p.name: p.read_text(encoding="utf-8") for p in OUTPUT.glob("*.md")}
    return sorted(n for n in {*pages, *current} if pages.get(n) != current.get(n))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only say whether it is stale")
    args = parser.parse_args(argv)
    pages = render()
    if args.check:
        if stale(pages):
            print(f"{OUTPUT} is out of date: run `python -m tools.apiref`", file=sys.stderr)
            return 1
        return 0
    OUTPUT.mkdir(parents=True, exist_ok=True)
    for name in stale(pages):
        if name in pages:
            (OUTPUT / name).write_text(pages[name], encoding="utf-8")
        else:
            (OUTPUT / name).unlink()
    c = counts()
    print(f"wrote {OUTPUT}: {len(pages)} pages, {c['names']} public names, {c['members']} members")
    return 0


if __name__ == "__main__":
    sys.exit(main())
