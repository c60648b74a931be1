#!/usr/bin/env python3
"""Finds links into the docs that lead nowhere. Usage: scripts/check_doc_links.py [REPO]

Checks, in every file git tracks: each Markdown link or image `[text](target)` of a .md file
(relative to that file; its #anchor against the target page's headings), and each path written
as docs/... (relative to the repository) or perf/... in a page of docs/ (relative to docs/). A path on a
line that names a commit ("in git history, commit 1a2b3c4") must exist in that commit instead.
Prints every one that does not exist and exits 1 if there is one.
"""

import os
import re
import subprocess
import sys

root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                       os.path.join(os.path.dirname(__file__), ".."))
files = subprocess.run(["git", "-C", root, "ls-files"], check=True, capture_output=True,
                       text=True).stdout.split()
link = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
docs_path = re.compile(r"(?<![\w./-])(docs/[\w./-]*[\w/])(#[\w-]+)?")
perf_path = re.compile(r"(?<![\w./-])(perf/[\w./-]*[\w/])(#[\w-]+)?")


def anchors(page):
    """GitHub's anchors for the headings of a Markdown page."""
    result = set()
    for line in open(page, encoding="utf-8"):
        match = re.match(r"#+\s+(.*)", line)
        if match:
            text = re.sub(r"[`*]", "", match.group(1)).strip().lower()
            text = re.sub(r"[^\w\- ]", "", text)
            result.add(text.replace(" ", "-"))
    return result


bad = 0
seen = set()


def in_commit(commit, path):
    return subprocess.run(["git", "-C", root, "cat-file", "-e", f"{commit}:{path.rstrip('/')}"],
                          capture_output=True).returncode == 0


def check(source, number, base, target, commit=None):
    global bad
    if (source, number, target) in seen:
        return
    seen.add((source, number, target))
    path, _, anchor = target.partition("#")
    full = os.path.normpath(os.path.join(base, path)) if path else os.path.join(root, source)
    problem = None
    if commit:
        if not in_commit(commit, os.path.relpath(full, root)):
            problem = "not in commit " + commit
    elif not os.path.exists(full):
        problem = "no such file"
    elif anchor and full.endswith(".md") and anchor not in anchors(full):
        problem = "no heading #" + anchor
    if problem:
        print(f"{source}:{number}: {target}: {problem}")
        bad = 1


for source in files:
    if not source.endswith((".md", ".sh", ".py", ".hpp", ".cpp", ".txt", ".cmake", ".in")):
        continue
    here = os.path.dirname(os.path.join(root, source))
    try:
        lines = open(os.path.join(root, source), encoding="utf-8").readlines()
    except (UnicodeDecodeError, FileNotFoundError):
        continue
    in_docs = source.startswith("docs/") and source.endswith(".md")
    for number, line in enumerate(lines, 1):
        commit = re.search(r"\bcommit ([0-9a-f]{7,40})\b", line)
        commit = commit.group(1) if commit else None
        if source.endswith(".md"):
            for target in link.findall(line):
                if not re.match(r"[a-z]+:", target):
                    check(source, number, here, target)
        for match in docs_path.finditer(line):
            check(source, number, root, match.group(1) + (match.group(2) or ""), commit)
        if in_docs:
            for match in perf_path.finditer(line):
                check(source, number, os.path.join(root, "docs"),
                      match.group(1) + (match.group(2) or ""))
sys.exit(bad)
