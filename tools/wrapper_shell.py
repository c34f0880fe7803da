"""The commands a shell script runs, read as the shell would split them, without running it.

A job is often the user's own script: start ``vllm serve …`` in the background, wait for ``/health``, run the
client, kill the server. medic reads through it before any launch (tools/wrapper.py), so the server's library code
is scanned and the output checked as if the two commands had been given apart. The reading is the shell's own,
as far as it goes without running anything:

- a logical line is a physical one with its backslash-newline continuations joined; a here-document's body is
  skipped; ``#`` at the start of a word begins a comment;
- a line splits into commands at unquoted ``;``, ``&``, ``&&``, ``||``, ``|``, ``(`` and ``)``;
- ``$NAME``, ``${NAME}``, ``${NAME:-word}`` (``:=``, ``:+``, ``:?``) expand to what the script assigned by then
  (``NAME=value``, ``export NAME=value``), else the job's environment, else ``$1``… the script's arguments; an
  unquoted value splits into words, a quoted one does not; single quotes keep ``$`` as it is;
- redirections (``> log``, ``2>&1``) are not words of the command; ``shlex`` then splits what is left.

What it cannot know (a variable the script never assigns, ``$(…)``, a value the shell computes) is named in
``ScriptCommand.unresolved``, never guessed.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

ASSIGNMENT = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>.*)$", re.S)
PARAMETER = re.compile(r"\$(?:\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*|[0-9]+|[@*#?!$-])"
                       r"(?:(?P<op>:?[-=+?])(?P<word>[^}]*))?\}|(?P<name>[A-Za-z_][A-Za-z0-9_]*|[0-9@*#?!$-]))")
REDIRECTION = re.compile(r"\d*(?:&>>|&>|>>|>&|<&|>\||<>|>|<)\s*(?:&?\d+-?|&-|\"[^\"]*\"|'[^']*'|[^\s;&|()]+)")
HEREDOC = re.compile(r"<<-?\s*(?P<q>['\"]?)(?P<end>[A-Za-z_][A-Za-z0-9_]*)(?P=q)")
ASSIGNING = frozenset({"export", "declare", "typeset", "local", "readonly"})
WORD_START = " \t;&|()"


@dataclass(frozen=True)
class ScriptCommand:
    """One simple command of the script, as the shell would run it."""

    words: tuple[str, ...]
    line: int  # the script's line it starts on, from 1
    background: bool  # ended by ``&``
    unresolved: tuple[str, ...] = ()  # what the reading could not know: ``$NAME`` unassigned, ``$(...)``

    def text(self) -> str:
        return shlex.join(self.words)


def logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, text) of each logical line: continuations joined, here-document bodies left out."""
    out: list[tuple[int, str]] = []
    pending, start, heredoc_end = "", 0, None
    for number, raw in enumerate(text.splitlines(), start=1):
        if heredoc_end is not None:
            if raw.strip() == heredoc_end:
                heredoc_end = None
            continue
        if not pending:
            start = number
        if raw.endswith("\\") and not raw.endswith("\\\\"):
            pending += raw[:-1]
            continue
        line, pending = pending + raw, ""
        out.append((start, line))
        if (doc := HEREDOC.search(line)) is not None:
            heredoc_end = doc["end"]
    if pending:
        out.append((start, pending))
    return out


def segments(line: str) -> list[tuple[str, str]]:
    """(command text, the operator after it) of one logical line, split where the shell would split it."""
    out: list[tuple[str, str]] = []
    current: list[str] = []
    quote, depth, i = "", 0, 0
    while i < len(line):
        c = line[i]
        if quote == "'":
            quote = "" if c == "'" else quote
        elif quote == '"':
            if c == "\\":
                current.append(line[i : i + 2])
                i += 2
                continue
            quote = "" if c == '"' else quote
        elif c == "#" and (i == 0 or line[i - 1] in WORD_START):
            break
        elif c == "\\":
            current.append(line[i : i + 2])
            i += 2
            continue
        elif c in "'\"":
            quote = c
        elif line.startswith("$(", i):
            depth += 1
            current.append("$(")
            i += 2
            continue
        elif c == ")" and depth:
            depth -= 1
        elif c in ";&|()" and not depth and not _in_redirection(line, i):
            op = re.match(r"&&|\|\||;;|\|&|[;&|()]", line[i:])
            assert op is not None
            out.append(("".join(current), op.group()))
            current = []
            i += len(op.group())
            continue
        current.append(c)
        i += 1
    out.append(("".join(current), ""))
    return [(text, op) for text, op in out if text.strip() or op == "&"]


def _in_redirection(line: str, i: int) -> bool:
    """``&`` of ``2>&1``, ``&>``, ``>&``; ``|`` of ``>|``: part of a redirection, not an operator."""
    before, after = line[i - 1] if i else "", line[i + 1] if i + 1 < len(line) else ""
    return (line[i] == "&" and (before in "<>" or after == ">")) or (line[i] == "|" and before == ">")


class Reader:
    """Reads a script's commands in order, keeping the variables it assigns."""

    def __init__(self, env: Mapping[str, str], args: Sequence[str] = ()) -> None:
        self.vars = dict(env)
        self.vars.update({str(n): a for n, a in enumerate(args, start=1)})
        self.vars["@"] = self.vars["*"] = " ".join(args)
        self.vars["#"] = str(len(args))

    def commands(self, text: str) -> list[ScriptCommand]:
        found: list[ScriptCommand] = []
        for number, line in logical_lines(text):
            for raw, op in segments(line):
                command = self.command(raw, number, op == "&")
                if command is not None:
                    found.append(command)
        return found

    def command(self, raw: str, number: int, background: bool) -> ScriptCommand | None:
        expanded, unresolved = self.expand(raw)
        try:
            words = shlex.split(expanded)
        except ValueError as exc:  # an unbalanced quote: the shell would stop there too
            return ScriptCommand((raw.strip(),), number, background, (f"the line ({exc})",))
        if not words:
            return None
        assigning = words[0] in ASSIGNING
        names = [w for w in (words[1:] if assigning else words) if not w.startswith("-")]
        if assigning or all(ASSIGNMENT.match(w) for w in words):
            for word in names:
                if (match := ASSIGNMENT.match(word)) is not None:
                    self.vars[match["name"]] = match["value"]
            return None
        return ScriptCommand(tuple(words), number, background, tuple(dict.fromkeys(unresolved)))

    def value(self, match: re.Match[str], unresolved: list[str]) -> str:
        name = match["braced"] or match["name"]
        current = self.vars.get(name)
        op, word = match["op"], match["word"] or ""
        empty = current is None or (current == "" and op and op.startswith(":"))
        if op and op.endswith(("-", "=")) and empty:
            word = self.plain(word, unresolved)
            if op.endswith("="):
                self.vars[name] = word
            return word
        if op and op.endswith("+"):
            return "" if empty else self.plain(word, unresolved)
        if current is None:
            unresolved.append(f"${name}")
            return ""
        return current

    def plain(self, word: str, unresolved: list[str]) -> str:
        """A default's word (``${X:-word}``) as text: its parameters expanded, its quotes removed."""
        return PARAMETER.sub(lambda m: self.value(m, unresolved), word).replace('"', "").replace("'", "")

    def expand(self, raw: str) -> tuple[str, list[str]]:
        """``raw`` with its parameters expanded and redirections left out (quotes kept for shlex), and what
        could not be expanded."""
        out: list[str] = []
        unresolved: list[str] = []
        quote, i = "", 0
        while i < len(raw):
            c = raw[i]
            if quote == "'":
                quote = "" if c == "'" else quote
            elif c == "\\":
                out.append(raw[i : i + 2])
                i += 2
                continue
            elif c == "$" and (match := PARAMETER.match(raw, i)) is not None:
                value = self.value(match, unresolved)
                out.append(_escaped(value) if quote else " ".join(shlex.quote(p) for p in value.split()))
                i = match.end()
                continue
            elif raw.startswith("$(", i) or c == "`":
                unresolved.append("$(...)" if c == "$" else "`...`")
            elif not quote and (i == 0 or raw[i - 1] in WORD_START) and (
                    redirect := REDIRECTION.match(raw, i)) is not None:
                out.append(" ")
                i = redirect.end()
                continue
            elif c in "'\"":
                quote = "" if quote == c else (quote or c)
            out.append(c)
            i += 1
        return "".join(out), unresolved


def _escaped(value: str) -> str:
    """A value as it stays one word inside double quotes."""
    return re.sub(r'(["\\$`])', r"\\\1", value)


def script_commands(text: str, env: Mapping[str, str], args: Sequence[str] = ()) -> list[ScriptCommand]:
    """Every simple command of the script ``text``, in order, read with the job's ``env`` and arguments."""
    return Reader(env, args).commands(text)
