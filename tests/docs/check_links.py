#!/usr/bin/env python3
"""Checks the links of README.md and docs/*.md (ctest: DocsLinks, DocsLinksSelfTest).

  check_links.py [REPO]      every relative Markdown link [text](target) of README.md and
                             docs/*.md must name an existing file or directory of REPO (relative
                             to the linking file), a #anchor must be a heading of its file (in
                             the same file, or file.md#anchor), and every docs/*.md must be
                             reachable from README.md by following links
  check_links.py --self-test builds a small tree with known good and bad links and checks that
                             exactly the bad ones are reported

Prints each problem as FILE:LINE: broken link TARGET (reason) and exits 1, else one line
"checked N links in M files" and exits 0. Links to http, https and mailto are not followed; links
inside code (fenced blocks, `spans`) are not links. Anchors follow GitHub's slugs: the heading's
text lowercased, punctuation removed but for hyphens and underscores (backticks too), each space
a hyphen, and a repeated heading gets -1, -2, ... Python 3 standard library only.
"""
import os
import re
import sys
import tempfile
import urllib.parse

EXTERNAL = ('http://', 'https://', 'mailto:')

FENCE = re.compile(r'^ {0,3}(`{3,}|~{3,})')
ATX = re.compile(r'^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$')
SETEXT = re.compile(r'^ {0,3}(=+|-+)[ \t]*$')
CODE_SPAN = re.compile(r'(`+)(?!`)([\s\S]*?[^`])\1(?!`)')
# [text](target "title"), ![alt](target): the text may hold one level of brackets, the target
# one level of parentheses, or be written <like this>.
INLINE_LINK = re.compile(
    r'\[((?:[^\[\]\\]|\\.|\[[^\[\]]*\])*)\]'
    r'\(\s*(<[^<>\n]*>|(?:[^()\s\\]|\\.|\([^()\s]*\))*)'
    r'(?:\s+(?:"[^"]*"|\'[^\']*\'|\([^()]*\)))?\s*\)')
REF_DEF = re.compile(r'^ {0,3}\[([^\]]+)\]:\s*(<[^>]*>|\S+)')
HTML_ANCHOR = re.compile(r'<a\s[^>]*(?:name|id)\s*=\s*["\']([^"\']+)["\']', re.I)


def github_slug(text):
    """The anchor GitHub gives a heading's text (before de-duplication)."""
    text = re.sub(r'!?\[([^\]]*)\]\([^)]*\)', r'\1', text)  # a link in a heading: its text
    text = text.strip().lower()
    text = re.sub(r'[^\w\- ]', '', text)  # \w keeps letters, digits and underscores
    return text.replace(' ', '-')


def blocks(lines):
    """The text of a Markdown file outside fenced code, as (first line number, text) runs of
    consecutive non-blank lines, so that a code span may go over a line break."""
    fence = None
    run, start = [], 0
    for n, line in enumerate(lines, 1):
        m = FENCE.match(line)
        if fence is not None:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                fence = None
            continue
        if m:
            fence = m.group(1)
            if run:
                yield start, run
            run = []
            continue
        if line.strip():
            if not run:
                start = n
            run.append(line)
        elif run:
            yield start, run
            run = []
    if run:
        yield start, run


def headings(path):
    """The anchors a Markdown file defines: its headings' slugs (repeats numbered) and any
    <a name=...> or id=... it holds."""
    anchors, seen = set(), {}
    with open(path, encoding='utf-8') as f:
        lines = f.read().split('\n')

    def add(text):
        slug = github_slug(text)
        if slug in seen:
            seen[slug] += 1
            slug = f'{slug}-{seen[slug]}'
        else:
            seen[slug] = 0
        anchors.add(slug)

    for _, run in blocks(lines):
        for i, line in enumerate(run):
            m = ATX.match(line)
            if m:
                add(m.group(2) or '')
            elif i > 0 and SETEXT.match(line) and not ATX.match(run[i - 1]) and \
                    not run[i - 1].lstrip().startswith(('|', '-', '*', '>')):
                add(run[i - 1])
            for a in HTML_ANCHOR.findall(line):
                anchors.add(a)
    return anchors


def links(path):
    """(line, target) of every link of a Markdown file outside code."""
    with open(path, encoding='utf-8') as f:
        lines = f.read().split('\n')
    found = []
    for start, run in blocks(lines):
        text = '\n'.join(run)
        # A code span's text is not Markdown: blank it out, keeping the line breaks.
        text = CODE_SPAN.sub(lambda m: re.sub(r'[^\n]', ' ', m.group(0)), text)
        for m in INLINE_LINK.finditer(text):
            target = m.group(2)
            if target.startswith('<') and target.endswith('>'):
                target = target[1:-1]
            found.append((start + text.count('\n', 0, m.start()), target))
        for i, line in enumerate(text.split('\n')):
            m = REF_DEF.match(line)
            if m:
                found.append((start + i, m.group(2).strip('<>')))
    return found


def check(repo):
    """Returns (problems, links checked, files checked); a problem is a printable line."""
    repo = os.path.realpath(repo)
    docs = os.path.join(repo, 'docs')
    files = [os.path.join(repo, 'README.md')]
    if os.path.isdir(docs):
        files += sorted(os.path.join(docs, f) for f in os.listdir(docs) if f.endswith('.md'))
    problems, count = [], 0
    anchor_cache = {}
    edges = {f: set() for f in files}

    def anchors_of(path):
        if path not in anchor_cache:
            anchor_cache[path] = headings(path)
        return anchor_cache[path]

    for f in files:
        if not os.path.isfile(f):
            problems.append(f'{os.path.relpath(f, repo)}:0: missing file')
            continue
        rel = os.path.relpath(f, repo)
        for line, target in links(f):
            if target.lower().startswith(EXTERNAL):
                continue
            count += 1
            path_part, _, anchor = target.partition('#')
            path_part = urllib.parse.unquote(path_part)
            if path_part:
                dest = os.path.realpath(os.path.join(os.path.dirname(f), path_part))
                if dest != repo and not dest.startswith(repo + os.sep):
                    problems.append(f'{rel}:{line}: broken link {target} (outside the repository)')
                    continue
                if not os.path.exists(dest):
                    problems.append(f'{rel}:{line}: broken link {target} (no such file or directory)')
                    continue
            else:
                dest = f
            if dest.endswith('.md') and os.path.isfile(dest):
                edges[f].add(dest)
                if anchor and urllib.parse.unquote(anchor) not in anchors_of(dest):
                    where = 'this file' if dest == f else os.path.relpath(dest, repo)
                    problems.append(f'{rel}:{line}: broken link {target} (no heading #{anchor} in {where})')
            elif anchor and os.path.isdir(dest):
                problems.append(f'{rel}:{line}: broken link {target} (an anchor on a directory)')

    # Every docs/*.md must be reachable from README.md by following links.
    seen, todo = set(), [files[0]]
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen.add(f)
        if f not in edges and os.path.isfile(f):  # a linked .md outside docs/: follow it too
            edges[f] = {os.path.realpath(os.path.join(os.path.dirname(f), t.partition('#')[0]))
                        for _, t in links(f)
                        if not t.lower().startswith(EXTERNAL) and t.partition('#')[0].endswith('.md')}
        todo += [d for d in edges.get(f, ()) if d not in seen]
    for f in files[1:]:
        if f not in seen:
            problems.append(f'{os.path.relpath(f, repo)}:1: not reachable from README.md (no chain of links leads here)')
    return problems, count, len(files)


def self_test():
    """A tree with two good links, two broken ones and one unreachable doc: the checker must
    report exactly the bad ones."""
    failures = []

    def expect(what, got, want):
        if got != want:
            failures.append(f'{what}: got {got!r}, want {want!r}')

    for text, slug in [('Releases', 'releases'), ('A stripped OTP 28 or later', 'a-stripped-otp-28-or-later'),
                       ('`beam-bpf-blame FUNC PID`', 'beam-bpf-blame-func-pid'),
                       ("Process shares against the VM's own trace", 'process-shares-against-the-vms-own-trace'),
                       ('Output files and `/dev/null` (fixed 2026-11-25)', 'output-files-and-devnull-fixed-2026-11-25'),
                       ('Between processes, without `--process`: x', 'between-processes-without---process-x'),
                       ('snake_case name', 'snake_case-name')]:
        expect(f'slug of {text!r}', github_slug(text), slug)

    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, 'docs'))
        os.makedirs(os.path.join(tmp, 'src'))

        def write(name, text):
            with open(os.path.join(tmp, name), 'w', encoding='utf-8') as f:
                f.write(text)

        write('src/tool.c', '')
        write('README.md', '\n'.join([
            '# Tool',
            '',
            'The guide: [good](docs/good.md), and [gone](docs/missing.md).',  # line 3: broken
            'Its source is in [src/](src/); see [the web](https://example.com/x.md#nope).',
            '`[not a link](docs/nowhere.md)` and a [section](docs/good.md#no-such-heading).',  # line 5: broken
            '',
            '```',
            '[also not a link](docs/nowhere.md)',
            '```',
        ]) + '\n')
        write('docs/good.md', '\n'.join([
            '# Good',
            '',
            '## Usage',
            '',
            '## Usage',
            '',
            'Back to the [README](../README.md), [Usage](#usage-1) and [usage](#usage).',
            '',
            '```sh',
            '# a comment, not a heading',
            '```',
        ]) + '\n')
        write('docs/orphan.md', '# Orphan\n\nNo one links here: [README](../README.md).\n')

        problems, count, nfiles = check(tmp)
        expect('problems', sorted(problems), sorted([
            'README.md:3: broken link docs/missing.md (no such file or directory)',
            'README.md:5: broken link docs/good.md#no-such-heading (no heading #no-such-heading in docs/good.md)',
            'docs/orphan.md:1: not reachable from README.md (no chain of links leads here)',
        ]))
        expect('links checked', count, 8)
        expect('files checked', nfiles, 3)

        # The same tree with the bad ones fixed passes.
        write('README.md', 'The guide: [good](docs/good.md), [orphan](docs/orphan.md#orphan).\n')
        problems, _, _ = check(tmp)
        expect('problems once fixed', problems, [])

    for f in failures:
        print(f'self-test: {f}')
    if failures:
        print(f'self-test FAILED: {len(failures)} check(s)')
        return 1
    print('self-test passed: the broken links and the unreachable doc were found, nothing else')
    return 0


def main(argv):
    if argv[1:] == ['--self-test']:
        return self_test()
    if len(argv) > 2 or (len(argv) == 2 and argv[1].startswith('-')):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    repo = argv[1] if len(argv) == 2 else os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..')
    problems, count, nfiles = check(repo)
    for p in problems:
        print(p)
    if problems:
        print(f'{len(problems)} problem(s) in {count} links of {nfiles} files')
        return 1
    print(f'checked {count} links in {nfiles} files')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
