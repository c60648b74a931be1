"""Copies exactly the files the Conan recipe exports into a folder, without Conan.

Usage: recipe_exports.py CONANFILE SOURCE_DIR DEST_DIR OPTIONS_FILE

Reads two literals of the recipe class (with ast, so Conan need not be installed):
`exports_sources`, the fnmatch patterns Conan copies (matched against each file's path relative
to the recipe's folder, "!pattern" excluding, as conan.tools.files.copy does), and
`_cmake_cache_variables`, the CMake cache variables its generate() sets. Writes those as -D
options, one a line, to OPTIONS_FILE, so the test configures the copy as the recipe would.
"""

import ast
import fnmatch
import os
import shutil
import sys


def recipe_literals(conanfile, names):
    tree = ast.parse(open(conanfile).read(), conanfile)
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for statement in node.body:
                if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
                    target = statement.targets[0]
                    if isinstance(target, ast.Name) and target.id in names:
                        found[target.id] = ast.literal_eval(statement.value)
    missing = [name for name in names if name not in found]
    if missing:
        sys.exit(f"{conanfile}: no literal class attribute {', '.join(missing)} in the recipe")
    return found


def main():
    conanfile, source_dir, dest_dir, options_file = sys.argv[1:5]
    literals = recipe_literals(conanfile, ("exports_sources", "_cmake_cache_variables"))
    patterns = literals["exports_sources"]
    if isinstance(patterns, str):
        patterns = (patterns,)
    included = [p for p in patterns if not p.startswith("!")]
    excluded = [p[1:] for p in patterns if p.startswith("!")]

    copied = 0
    for root, folders, files in os.walk(source_dir):
        folders[:] = [f for f in folders if f != ".git"]
        for name in files:
            relative = os.path.relpath(os.path.join(root, name), source_dir)
            if (any(fnmatch.fnmatchcase(relative, p) for p in included)
                    and not any(fnmatch.fnmatchcase(relative, p) for p in excluded)):
                target = os.path.join(dest_dir, relative)
                os.makedirs(os.path.dirname(target), exist_ok=True)
                shutil.copy2(os.path.join(root, name), target)
                copied += 1
    if copied == 0:
        sys.exit(f"{conanfile}: exports_sources {patterns} matched no file in {source_dir}")

    with open(options_file, "w") as out:
        for name, value in literals["_cmake_cache_variables"].items():
            if isinstance(value, bool):
                value = "ON" if value else "OFF"
            out.write(f"-D{name}={value}\n")
    print(f"copied {copied} files matching {', '.join(patterns)}")


if __name__ == "__main__":
    main()
