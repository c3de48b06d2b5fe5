#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# The tree's boundaries, checked from the #include lines of every C source:
# what each folder may include, that outside core/ only core/conn.h of core/
# is seen, and that neither core/'s files nor the folders include in a cycle.
# Usage: scripts/check-layout.py [--graph]   (exit 1 naming each breach)
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SOURCES = ('.c', '.h', '.cu')

# What each product folder may include besides itself and the public
# headers (included by their installed names). Longest prefix wins.
ALLOWED = {
    'common/': ['common/'],
    'core/': ['common/', 'core/'],
    'plugins/shm/': ['common/', 'core/conn.h'],
    'plugins/ucx/': ['common/', 'core/conn.h'],
    'host-shim/': ['common/'],
    'examples/': [],
    'python/': [],
}
# Harnesses that reach inside a unit on purpose: the tests of core/'s units
# and of the ucx plugin's modules, and the fuzzers and benchmarks that
# compile a unit into themselves. They may include any project header.
WHITEBOX = ('tests/', 'fuzz/', 'bench/')


def project_files():
    for top in sorted(os.listdir(ROOT)):
        if top.startswith('.') or top.startswith('build') or not os.path.isdir(
                os.path.join(ROOT, top)):
            continue
        for d, dirs, files in os.walk(os.path.join(ROOT, top)):
            dirs[:] = sorted(x for x in dirs if not x.startswith(('.', 'build')))
            for f in sorted(files):
                if f.endswith(SOURCES):
                    yield os.path.relpath(os.path.join(d, f), ROOT)


def includes(path):
    with open(os.path.join(ROOT, path), encoding='utf-8', errors='replace') as f:
        return INCLUDE.findall(f.read())


def folder_of(path):
    return os.path.dirname(path) + '/'


def rule_for(path):
    best = None
    for prefix in ALLOWED:
        if path.startswith(prefix) and (best is None or len(prefix) > len(best)):
            best = prefix
    return best


def find_cycle(graph):
    """One cycle of the directed graph as a list of nodes, or None."""
    state = {}
    for start in sorted(graph):
        if state.get(start):
            continue
        stack = [(start, iter(sorted(graph[start])))]
        path = [start]
        state[start] = 1
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                path.pop()
                state[node] = 2
            elif state.get(child) == 1:
                return path[path.index(child):] + [child]
            elif not state.get(child) and child in graph:
                state[child] = 1
                path.append(child)
                stack.append((child, iter(sorted(graph[child]))))
    return None


def main():
    files = list(project_files())
    present = set(files)
    breaches = []
    file_graph = {}
    folder_graph = {}
    for path in files:
        for inc in includes(path):
            if '/' not in inc:
                if inc.startswith('ecc_') or not os.path.exists(os.path.join(ROOT, inc)):
                    continue  # a public header by its installed name, or generated
            if inc not in present:
                if '/' in inc:
                    breaches.append(f'{path}: includes "{inc}", which is not a file of the tree')
                continue
            if path.startswith('core/') and inc.startswith('core/'):
                file_graph.setdefault(path, set()).add(inc)
            if folder_of(inc) != folder_of(path):
                folder_graph.setdefault(folder_of(path), set()).add(folder_of(inc))
            if path.startswith(WHITEBOX):
                continue
            if inc.startswith('core/') and inc != 'core/conn.h' and not path.startswith('core/'):
                breaches.append(f'{path}: includes "{inc}"; outside core/ only core/conn.h is '
                                'its face (add what you need there)')
                continue
            rule = rule_for(path)
            if rule is None or inc.startswith(rule):
                continue
            if not any(inc == a or (a.endswith('/') and inc.startswith(a)) for a in ALLOWED[rule]):
                breaches.append(f'{path}: includes "{inc}", which {rule} may not depend on '
                                f'(allowed: {", ".join(ALLOWED[rule]) or "public headers only"})')
    for f in file_graph:
        file_graph[f].discard(f)
    cycle = find_cycle(file_graph)
    if cycle:
        breaches.append('core/ includes in a cycle: ' + ' -> '.join(cycle))
    product = {k: {v for v in vs if not v.startswith(WHITEBOX)}
               for k, vs in folder_graph.items() if not k.startswith(WHITEBOX)}
    cycle = find_cycle(product)
    if cycle:
        breaches.append('folders include each other in a cycle: ' + ' -> '.join(cycle))
    if '--graph' in sys.argv:
        for k in sorted(product):
            print(f'{k} -> {" ".join(sorted(product[k]))}')
    for b in breaches:
        print(f'check-layout: {b}', file=sys.stderr)
    if breaches:
        print(f'check-layout: {len(breaches)} breaches of the layout (docs/contributing.md, The layout)',
              file=sys.stderr)
        return 1
    print(f'check-layout: {len(files)} files, {len(product)} folders, no breach, no cycle')
    return 0


if __name__ == '__main__':
    sys.exit(main())
