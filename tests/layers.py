"""Every #include "..." under src/ against the layer order of docs/architecture.md.

usage: layers.py SRC_DIR ARCHITECTURE_MD

The order is the document's line that starts with "**Order**:": the layers in backticks, lowest
first, separated by "<", then after "independent:" the layers that include only `common` and
themselves and that no other layer includes. A file may include the public "mha.h", the headers
of its own layer (by a path relative to its folder or to src/) and those of the layers below
it. Exits 1 naming each offending file and include; also for a folder of src/ that the order
does not name, and for an include that resolves to no file.
"""
import os
import re
import sys


def read_order(doc):
    for line in open(doc, encoding="utf-8"):
        if line.startswith("**Order**:"):
            chain, _, rest = line.partition("independent:")
            return re.findall(r"`([a-z_]+)`", chain), re.findall(r"`([a-z_]+)`", rest)
    sys.exit("%s: no line starting with **Order**:" % doc)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, doc = sys.argv[1], sys.argv[2]
    chain, independent = read_order(doc)
    rank = {name: i for i, name in enumerate(chain)}
    problems = []

    def allowed(own, other):
        if other == own:
            return True
        if own in independent:
            return other == "common"
        if other in independent:
            return False
        return own in rank and other in rank and rank[other] < rank[own]

    for layer in sorted(os.listdir(src)):
        folder = os.path.join(src, layer)
        if not os.path.isdir(folder):
            continue
        if layer not in rank and layer not in independent:
            problems.append("src/%s/: a folder the order in %s does not name" % (layer, doc))
            continue
        for root, _, files in os.walk(folder):
            for name in sorted(files):
                if not name.endswith((".c", ".h")):
                    continue
                path = os.path.join(root, name)
                rel = os.path.relpath(path, os.path.dirname(src))
                for n, line in enumerate(open(path, encoding="utf-8"), 1):
                    m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
                    if not m or m.group(1) == "mha.h":
                        continue
                    inc = m.group(1)
                    if os.path.isfile(os.path.join(root, inc)):
                        target = os.path.relpath(os.path.join(root, inc), src)
                    elif os.path.isfile(os.path.join(src, inc)):
                        target = os.path.normpath(inc)
                    else:
                        problems.append('%s:%d: #include "%s" is no file of src/' % (rel, n, inc))
                        continue
                    other = target.split(os.sep)[0]
                    if not allowed(layer, other):
                        problems.append('%s:%d: #include "%s": layer %s may not include %s (%s)'
                                        % (rel, n, inc, layer, other, doc))
    for p in problems:
        print(p)
    if problems:
        sys.exit(1)
    print("layers: every include under %s follows %s" % (src, " < ".join(chain)))


if __name__ == "__main__":
    main()
