#!/usr/bin/python3
"""check_layers.py -- the include rules of the source tree (make test: t_layers).

1. The wings of src/ are layered; a file includes headers of its own wing
   or of a lower one only:
       base < gguf < kernels < text < engine = models = mpi < gen < store < common
   base: buffers, errors, hashes, UTF-8, escaping, JSON text, the version
   (nothing of the model); gguf: the file; kernels: arithmetic on the
   weight formats (they name GGUF types); text: tokenizer, prompt format,
   DSML; engine: the model and its sessions, beside models/ (one file per
   model graph, reached by the engine through the graph table of
   models/graph.h) and mpi/ as its transport
   across ranks (one layer: the transport's worker ranks run the engine,
   and the engine calls the transport only through the hook table of the
   public src/ds4_transport.h, which mpi.c registers -- so the two do
   not call each other in a circle); gen: the generation driver (sampling,
   drafts, stop rules, DSML calls, logprobs) over sessions; store: state on disk and prefix
   reuse, through the public API only; common: what the binaries share.
2. store/ and mpi/ use the engine through the public headers only (of the
   lower wings, store/ may include base/, mpi/ base/ and gguf/: the split
   rules read the model's file).
3. The public headers (src/ds4*.h: ds4.h includes every part) include
   only public headers.
4. Front ends (cli/, server/, agent/, tools/, bench/) include public headers
   only -- src/ds4*.h, src/common/*.h, src/base/*.h -- and their own
   directory's, except the files listed in INTERNAL with the reason.
5. No include cycle between modules (x.c + x.h) anywhere in src/, cli/,
   server/, agent/, tools/.
6. No call cycle between modules in src/ and agent/: module A uses module
   B when A's .c (or an inline function of its header) names a function
   that B's .c defines (non-static, defined in one module only).  A cycle
   means neither module can be read, tested or replaced without the other.

Prints one line per violation and exits 1; 0 when the tree holds.
Standard library only: /usr/bin/python3 tools/check_layers.py [ROOT]
"""
import os
import re
import sys

RANK = {'base': 0, 'gguf': 1, 'kernels': 2, 'text': 3, 'engine': 4, 'models': 4, 'mpi': 4, 'gen': 5,
        'store': 6, 'common': 7}
CALL_SCOPE = ('src', 'agent')
# Call cycles that are known and may not grow (a component of the call
# graph passes when it lies inside one of these), each with the reason and
# the way out.  None today: a new entry must argue its case here, as
#   frozenset(('src/engine/a', 'src/mpi/b')): 'why; the way out',
# (modules are paths without .c/.h).  The engine <-> mpi circle left
# through the hook table of src/ds4_transport.h.
KNOWN_CALL_CYCLES = {}
# wing -> the lower wings it may still include (rule 2)
PUBLIC_ONLY_WINGS = {'store': ('base',), 'mpi': ('base', 'gguf')}
FRONT = ('cli', 'server', 'agent', 'tools', 'bench')
PUBLIC_WINGS = ('common', 'base')
# Front-end files that work below the public API, and why.
INTERNAL = {
    'tools/ds4_quantize.c': 'writes GGUF files: the writer, the tensor layout, the quantizers',
    'tools/ds4_synth.c': 'writes GGUF files: the writer, the tensor layout, the quantizers',
    'tools/ds4_gguf.c': 'rewrites GGUF files per rank: the writer, the layout, the MPI split rule',
    'tools/get_fetch.c': 'SHA-256 while downloading (base/hash.h is public; listed for the record)',
    'bench/bench_kernels.c': 'measures the kernels themselves',
    'bench/bench_attn.c': 'measures the attention kernels themselves',
    'bench/bench_kda.c': 'measures the KDA recurrence kernels themselves',
    'bench/bench_ggml_ds4.c': 'measures the kernels beside ggml\'s',
}
INC = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def files(root, top):
    for d, _, fs in os.walk(os.path.join(root, top)):
        if 'node_modules' in d:
            continue
        for f in sorted(fs):
            if f.endswith(('.c', '.h')):
                yield os.path.relpath(os.path.join(d, f), root)


def includes(root, rel):
    with open(os.path.join(root, rel), encoding='utf-8', errors='replace') as f:
        return INC.findall(f.read())


def resolve(root, rel, inc):
    """The repository path an include names, or None (generated headers)."""
    for cand in (os.path.join(os.path.dirname(rel), inc), os.path.join('src', inc)):
        cand = os.path.normpath(cand)
        if os.path.exists(os.path.join(root, cand)):
            return cand
    return None


# Comments and string/char literals out, so that only code names count.
CODE_NOISE = re.compile(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
# A function definition at column 0 (the code's style): name(params) {
# (static anywhere before the name, e.g. behind a target macro: file-local)
FUNC_DEF = re.compile(r'^(?![\w \t*]*\bstatic\b)(?!typedef\b|extern\b|return\b)[A-Za-z_][\w \t*]*?\b([A-Za-z_]\w*)'
                      r'\s*\([^;{}]*?\)\s*\{', re.M | re.S)
INLINE_DEF = re.compile(r'\binline\b[^;{}]*?\([^;{}]*?\)\s*\{')
NAME = re.compile(r'\b[A-Za-z_]\w*\b')


def code(root, rel):
    with open(os.path.join(root, rel), encoding='utf-8', errors='replace') as f:
        return CODE_NOISE.sub(lambda m: ' ' if m.group(0)[0] == '/' else '""', f.read())


def inline_bodies(text):
    """The bodies of a header's inline functions (its only code)."""
    out = []
    for m in INLINE_DEF.finditer(text):
        depth, i = 0, m.end() - 1
        for j in range(i, len(text)):
            depth += {'{': 1, '}': -1}.get(text[j], 0)
            if depth == 0:
                out.append(text[i:j + 1])
                break
    return ' '.join(out)


def call_cycles(root, rels):
    """Cycles of the graph module -> modules whose functions it names."""
    texts = {r: code(root, r) for r in rels}
    owners = {}
    for r, t in texts.items():
        if r.endswith('.c'):
            for m in FUNC_DEF.finditer(t):
                if not m.group(1).startswith('__'):
                    owners.setdefault(m.group(1), set()).add(os.path.splitext(r)[0])
    # a name defined in several modules (alternative builds) is nobody's
    owner = {n: next(iter(ms)) for n, ms in owners.items() if len(ms) == 1}
    uses = {}
    for r, t in texts.items():
        m = os.path.splitext(r)[0]
        body = t if r.endswith('.c') else inline_bodies(t)
        for n in set(NAME.findall(body)):
            o = owner.get(n)
            if o and o != m:
                uses.setdefault(m, {}).setdefault(o, set()).add(n)
    # Tarjan's strongly connected components; one cycle reported per
    # component, with the names that make each step
    index, low, on, st, comps = {}, {}, set(), [], []

    def scc(v):
        index[v] = low[v] = len(index)
        st.append(v)
        on.add(v)
        for w in sorted(uses.get(v, ())):
            if w not in index:
                scc(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = st.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 and not any(set(comp) <= k for k in KNOWN_CALL_CYCLES):
                comps.append(set(comp))
    for v in sorted(uses):
        if v not in index:
            scc(v)
    out = []
    for comp in comps:
        # a shortest way back to the start, inside the component
        start = min(comp)
        prev, todo = {start: None}, [start]
        path = None
        while todo and not path:
            nxt = []
            for v in todo:
                for w in sorted(uses.get(v, ())):
                    if w == start:
                        path = [v]
                        while prev[path[-1]] is not None:
                            path.append(prev[path[-1]])
                        path = path[::-1]
                        break
                    if w in comp and w not in prev:
                        prev[w] = v
                        nxt.append(w)
                if path:
                    break
            todo = nxt
        path = path + [start]
        steps = ['%s (%s)' % (a, ', '.join(sorted(uses[a][b])[:3])) for a, b in zip(path, path[1:])]
        more = ['(the circle holds: %s)' % ' '.join(sorted(comp))] if len(comp) > len(path) - 1 else []
        out.append(steps + [start] + more)
    return out


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))
    bad = []
    all_files = []
    for top in ('src',) + FRONT:
        all_files += list(files(root, top))
    graph = {}
    for rel in all_files:
        parts = rel.split('/')
        incs = includes(root, rel)
        targets = [(i, resolve(root, rel, i)) for i in incs]
        graph[rel] = [t for _, t in targets if t]
        if parts[0] == 'src' and len(parts) == 3:
            wing = parts[1]
            if wing not in RANK:
                bad.append('%s: wing src/%s is not in the layer order (tools/check_layers.py)' % (rel, wing))
                continue
            for inc, t in targets:
                if not t or not t.startswith('src/') or t.count('/') != 2:
                    continue   # public header (src/ds4*.h) or generated
                w = t.split('/')[1]
                if w not in RANK:
                    continue
                if RANK[w] > RANK[wing]:
                    bad.append('%s: includes "%s": src/%s is above src/%s' % (rel, inc, w, wing))
                if wing in PUBLIC_ONLY_WINGS and w != wing and w not in PUBLIC_ONLY_WINGS[wing]:
                    bad.append('%s: includes "%s": src/%s uses the engine through public headers only'
                               % (rel, inc, wing))
        elif parts[0] == 'src' and len(parts) == 2:
            # a public header stands on public headers only: what a front
            # end includes must not bring internals with it
            for inc, t in targets:
                if t and t.startswith('src/') and t.count('/') != 1:
                    bad.append('%s: includes "%s": a public header includes only src/ds4*.h' % (rel, inc))
        elif parts[0] in FRONT:
            if rel in INTERNAL:
                continue
            for inc, t in targets:
                if not t:
                    continue
                if t.startswith('src/'):
                    p = t.split('/')
                    ok = (len(p) == 2 and p[1].startswith('ds4')) or (len(p) == 3 and p[1] in PUBLIC_WINGS)
                    if not ok:
                        bad.append('%s: includes "%s", an internal header of src/%s (front ends use '
                                   'src/ds4*.h, src/common/, src/base/)' % (rel, inc, p[1]))
                elif not (os.path.dirname(t) + '/').startswith(os.path.dirname(rel) + '/'):
                    bad.append('%s: includes "%s" from another front end' % (rel, inc))
    # 4. module cycles: a module is x.c + x.h; its edges are the modules of
    # the headers either includes
    def mod(path):
        return os.path.splitext(path)[0]
    mg = {}
    for rel, ts in graph.items():
        for t in ts:
            if mod(t) != mod(rel):
                mg.setdefault(mod(rel), set()).add(mod(t))
    state, stack, cycles = {}, [], []

    def visit(v):
        state[v] = 1
        stack.append(v)
        for w in sorted(mg.get(v, ())):
            if state.get(w) == 1:
                cycles.append(stack[stack.index(w):] + [w])
            elif w not in state:
                visit(w)
        stack.pop()
        state[v] = 2
    sys.setrecursionlimit(10000)
    for v in sorted(mg):
        if v not in state:
            visit(v)
    for c in cycles:
        bad.append('include cycle: ' + ' -> '.join(c))
    for c in call_cycles(root, [f for f in all_files if f.split('/')[0] in CALL_SCOPE]):
        bad.append('call cycle: ' + ' -> '.join(c))
    for b in bad:
        print(b)
    print('check_layers: %d files, %d problems' % (len(all_files), len(bad)))
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
