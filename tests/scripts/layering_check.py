"""The layering checks fail on what they exist to catch (cmake/layers.cmake holds the rules).

Usage: layering_check.py CMAKE SOURCE_DIR

Includes (cmake/check_includes.cmake): copies the layer folders and cmake/ of SOURCE_DIR to a
scratch folder; the copy as it is must pass. Then, each in a fresh copy, it plants a wrong include
at a line it chose and expects a failure naming file:line, the include as written and the rule:
  graph including train/; exec including parallel/ beyond parallel/communicator.h; cli including
  exec/; a relative "../../train/x.h" from exec/cpu/; an <exec/...> include in importer/; an
  include of a folder without a row (serve/); two at once (both named, "2 include(s)").
An include commented out must pass; removing an include that cmake/layers.cmake lists as a
temporary exception must fail naming the stale entry.
Links (cmake/layering.cmake): a scratch CMake project with interface targets named as the layers'
must configure with allowed links, and fail naming the target when graph links importer or the
cli (target onnxdp) links exec.
Prints what it checked and "ok"; exits 1 naming the failed check, with the checker's output.
"""
import os
import shutil
import subprocess
import sys
import tempfile

LAYERS = ["graph", "importer", "parallel", "exec", "compile", "train", "cli"]
CLI_ROW = "cli/ (itself), graph/, importer/, train/, compile/"
EXEC_ROW = "exec/ (itself), graph/, parallel/communicator.h"


def fail(what, output=""):
    sys.stderr.write(f"layering_check: {what}\n--- output ---\n{output}\n")
    sys.exit(1)


def copy_tree(source_dir, into):
    for folder in LAYERS:
        if os.path.isdir(os.path.join(source_dir, folder)):
            shutil.copytree(os.path.join(source_dir, folder), os.path.join(into, folder))
    os.makedirs(os.path.join(into, "cmake"))
    for name in ("layers.cmake", "check_includes.cmake", "layering.cmake"):
        shutil.copy(os.path.join(source_dir, "cmake", name), os.path.join(into, "cmake", name))


def plant(root, path, text):
    """Inserts `text` as a new line after the file's first #include line; returns its line number."""
    full = os.path.join(root, path)
    os.makedirs(os.path.dirname(full), exist_ok=True)
    lines = open(full).read().split("\n") if os.path.exists(full) else []
    at = next((i + 1 for i, line in enumerate(lines) if line.startswith("#include")), 0)
    lines.insert(at, text)
    with open(full, "w") as f:
        f.write("\n".join(lines))
    return at + 1


def check_includes(cmake, root):
    r = subprocess.run([cmake, f"-DONNXDP_ROOT={root}", "-P", os.path.join(root, "cmake", "check_includes.cmake")],
                       capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout + r.stderr


def main():
    cmake, source_dir = sys.argv[1], os.path.abspath(sys.argv[2])
    checks = 0
    with tempfile.TemporaryDirectory(prefix="onnxdp_layering_") as scratch:
        def fresh(name):
            root = os.path.join(scratch, name)
            copy_tree(source_dir, root)
            return root

        rc, out = check_includes(cmake, fresh("as_is"))
        if rc != 0 or "layering: ok" not in out:
            fail(f"the unchanged tree fails the include check (exit {rc})", out)
        checks += 1

        # Each case: (name, [(file, line to plant)], [expected substrings, {line} filled in]).
        cases = [
            ("graph_includes_train", [("graph/graph.h", '#include "train/trainer.h"')],
             ['graph/graph.h:{0}: #include "train/trainer.h": graph/ may include only graph/ (itself)']),
            ("exec_includes_data_parallel", [("exec/plan.cpp", '#include "parallel/data_parallel.h"')],
             [f'exec/plan.cpp:{{0}}: #include "parallel/data_parallel.h": exec/ may include only {EXEC_ROW}']),
            ("cli_includes_exec", [("cli/cmd_train.cpp", '#include "exec/plan.h"')],
             [f'cli/cmd_train.cpp:{{0}}: #include "exec/plan.h": cli/ may include only {CLI_ROW}']),
            ("relative_include", [("exec/cpu/math.cpp", '#include "../../train/optimizer.h"')],
             [f'exec/cpu/math.cpp:{{0}}: #include "../../train/optimizer.h" (train/optimizer.h): '
              f'exec/ may include only {EXEC_ROW}']),
            ("angle_include", [("importer/importer.h", "#  include <exec/plan.h>")],
             ["importer/importer.h:{0}: #include <exec/plan.h>: importer/ may include only "
              "importer/ (itself), graph/"]),
            ("folder_without_row", [("serve/api.h", "#pragma once"), ("train/trainer.h", '#include "serve/api.h"')],
             ['train/trainer.h:{1}: #include "serve/api.h": serve/ is not a layer']),
            ("two_at_once", [("graph/tensor.h", '#include "importer/importer.h"'),
                             ("parallel/data_parallel.h", '#include "exec/kernel.h"')],
             ["2 include(s) break the rules", 'graph/tensor.h:{0}: #include "importer/importer.h"',
              'parallel/data_parallel.h:{1}: #include "exec/kernel.h": parallel/ may include only '
              "parallel/ (itself), graph/"]),
        ]
        for name, plants, expected in cases:
            root = fresh(name)
            lines = [plant(root, path, text) for path, text in plants]
            rc, out = check_includes(cmake, root)
            if rc == 0:
                fail(f"{name}: the include check passed", out)
            for e in expected:
                if e.format(*lines) not in out:
                    fail(f"{name}: the output does not say: {e.format(*lines)}", out)
            checks += 1

        root = fresh("commented_out")
        plant(root, "graph/graph.h", '// #include "train/trainer.h"')
        rc, out = check_includes(cmake, root)
        if rc != 0:
            fail("an include in a // comment fails the check", out)
        checks += 1

        # A temporary exception whose include is gone must be removed from the list.
        layers_cmake = open(os.path.join(source_dir, "cmake", "layers.cmake")).read()
        exceptions = [line.strip().strip('"') for line in
                      layers_cmake.split("set(ONNXDP_LAYERING_EXCEPTIONS")[1].split(")")[0].split("\n")
                      if line.strip().startswith('"')]
        if exceptions:
            source, included = exceptions[0].split(" -> ")
            root = fresh("stale_exception")
            path = os.path.join(root, source)
            kept = [line for line in open(path).read().split("\n") if f'"{included}"' not in line]
            with open(path, "w") as f:
                f.write("\n".join(kept))
            rc, out = check_includes(cmake, root)
            stale = f'the exception "{exceptions[0]}" matches no include any more'
            if rc == 0 or stale not in out:
                fail(f"removing {source}'s include of {included} did not fail naming the stale exception", out)
            checks += 1

        # Links: interface targets named as the layers' own, in a project of no language.
        root = fresh("links")
        base = """cmake_minimum_required(VERSION 3.25)
project(links NONE)
include(${CMAKE_SOURCE_DIR}/cmake/layering.cmake)
foreach(t onnxdp_graph onnxdp_importer onnxdp_parallel onnxdp_exec onnxdp_train onnxdp)
  add_library(${t} INTERFACE)
endforeach()
target_link_libraries(onnxdp_importer INTERFACE onnxdp_graph)
target_link_libraries(onnxdp_parallel INTERFACE onnxdp_graph)
target_link_libraries(onnxdp_exec INTERFACE onnxdp_graph onnxdp_parallel)
target_link_libraries(onnxdp_train INTERFACE onnxdp_importer onnxdp_exec onnxdp_parallel)
target_link_libraries(onnxdp INTERFACE onnxdp_train)
"""
        link_cases = [
            ("allowed", "", None),
            ("graph_links_importer", "target_link_libraries(onnxdp_graph INTERFACE onnxdp_importer)\n",
             "onnxdp_graph (graph/) links onnxdp_importer (importer/): graph/ may use only graph/ (itself)"),
            ("cli_links_exec", "target_link_libraries(onnxdp INTERFACE onnxdp_exec)\n",
             f"onnxdp (cli/) links onnxdp_exec (exec/): cli/ may use only {CLI_ROW}"),
        ]
        for name, extra, expected in link_cases:
            with open(os.path.join(root, "CMakeLists.txt"), "w") as f:
                f.write(base + extra)
            build = os.path.join(root, "build_" + name)
            r = subprocess.run([cmake, "-S", root, "-B", build], capture_output=True, text=True, timeout=120)
            out = r.stdout + r.stderr
            if expected is None and r.returncode != 0:
                fail(f"links {name}: configuring failed", out)
            if expected is not None and (r.returncode == 0 or expected not in out):
                fail(f"links {name}: configuring did not fail saying: {expected}", out)
            checks += 1

    print(f"layering_check: {checks} checks: the unchanged tree passes, each planted include or link fails "
          "naming it; ok")


if __name__ == "__main__":
    main()
