"""A kernel's short name: the function without its namespaces, template arguments and parameters.

``void at::native::(anonymous namespace)::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>,
std::array<char*, 3ul> >(int, ...)`` reads ``vectorized_elementwise_kernel``; a plain name (``sm90_xmma_gemm_...``,
``Memcpy DtoD``) is kept as it is. Pure string work; the full name stays in ``name``.
"""

from __future__ import annotations

import re

_OPEN = {"<": ">", "(": ")", "[": "]"}
_BRACKET = re.compile(r"[<>()\[\]]")


def _strip_nested(text: str, opening: str) -> str:
    """``text`` without any bracketed part opened by ``opening`` (nesting of every bracket kind followed).

    Only the brackets are visited (a regular expression finds them); the text between them is
    copied in slices. At depth 0 a bracket other than ``opening`` is text; inside, every opening
    bracket nests, a closing one that does not match the innermost is dropped with the rest, and an
    unclosed part is dropped up to the end."""
    out: list[str] = []
    stack: list[str] = []
    last = 0
    for m in _BRACKET.finditer(text):
        ch = m.group()
        if ch in _OPEN and (ch == opening or stack):
            if not stack:
                out.append(text[last:m.start()])
            stack.append(_OPEN[ch])
        elif stack and ch == stack[-1]:
            stack.pop()
            if not stack:
                last = m.end()
    if not stack:
        out.append(text[last:])
    return "".join(out)


def short_name(name: str | None) -> str | None:
    """The short name of one kernel name (None stays None)."""
    if name is None:
        return None
    text = name.strip()
    if "<" not in text and "::" not in text:
        return text
    text = text.replace("(anonymous namespace)", "anon")
    inner = _first_template_argument(text)
    text = _strip_nested(text, "<")
    text = _strip_nested(text, "(")
    text = text.strip()
    if " " in text:  # a return type before the function ("void f")
        text = text.rsplit(" ", 1)[-1]
    text = text.rsplit("::", 1)[-1]
    if (text in WRAPPERS or text.startswith("enable_sm")) and inner:  # a generic launcher: the kernel it runs is its first template argument
        return short_name(inner)
    return text or name


# Launchers whose own name says nothing: CUTLASS's Kernel / Kernel2, CUTLASS 3's device_kernel (and
# flash-attention's enable_sm* guards around the kernel class).
WRAPPERS = ("Kernel", "Kernel2", "device_kernel")


def _first_template_argument(text: str) -> str | None:
    """The first argument of the outermost template of the function name, or None."""
    head = _strip_nested(text, "(")
    start = head.find("<")
    if start < 0:
        return None
    depth = 0
    for i, ch in enumerate(head[start:], start):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
            if depth == 0:
                return head[start + 1:i].strip() or None
        elif ch == "," and depth == 1:
            return head[start + 1:i].strip() or None
    return None
