"""Writes a generated section into a markdown file, between two marker comments.

    python3 benches/common/doc_section.py FILE HEADING NAME SCRIPT < section

The markers are `<!-- NAME: begin (SCRIPT writes this part) -->` and `<!-- NAME: end -->`.
Replaces what stands between them in FILE with the text on stdin; where the first is missing,
first appends `## HEADING` and the two markers at the end of FILE, so a rerun replaces the
section and the file keeps one copy of it. FILE `-` prints the section on stdout instead.
"""
import sys

path, heading, name, script = sys.argv[1:]
begin, end = f"<!-- {name}: begin ({script} writes this part) -->", f"<!-- {name}: end -->"
section = sys.stdin.read().rstrip("\n")
if path == "-":
    print(section)
    sys.exit(0)
with open(path) as f:
    text = f.read()
if begin not in text:
    text = f"{text.rstrip(chr(10))}\n\n## {heading}\n\n{begin}\n{end}\n"
head, rest = text.split(begin, 1)
_, tail = rest.split(end, 1)
with open(path, "w") as f:
    f.write(f"{head}{begin}\n{section}\n{end}{tail}")
print(f"wrote the section {name!r} into {path}", file=sys.stderr)
