# The layers of onnxdp: which folder may include which (docs/DESIGN.md, "Folders"). The one place
# these arrows are written; two checks read them:
#   - cmake/check_includes.cmake (CTest test layering_includes): every #include of the layers'
#     sources (.h .cpp .cu) names a file of its own folder or of one its row allows;
#   - cmake/layering.cmake (at configure time): each layer's library target links only the
#     layers its row allows.
# Included by both; it only sets variables and defines onnxdp_layer_allows and onnxdp_layer_row.

# Every layer, lowest first. A folder's sources may always include their own folder's files.
set(ONNXDP_LAYERS graph importer parallel exec compile train cli)

# What else each layer may include: a folder (any file under it) or one header (that file only).
set(ONNXDP_MAY_INCLUDE_graph "")
set(ONNXDP_MAY_INCLUDE_importer graph)
set(ONNXDP_MAY_INCLUDE_parallel graph)
# exec runs the Communicator's collectives, and knows nothing else of the data-parallel rewrite.
set(ONNXDP_MAY_INCLUDE_exec graph parallel/communicator.h)
# compile: model + mode + world + rank + options -> the graph and plan that run.
set(ONNXDP_MAY_INCLUDE_compile graph importer parallel exec)
set(ONNXDP_MAY_INCLUDE_train graph importer parallel exec compile)
# cli is thin: it loads (importer, graph), compiles and trains; it never reaches into exec or parallel.
set(ONNXDP_MAY_INCLUDE_cli graph importer train compile)

# Folders of checks and measurements: they may include everything, so they are not scanned.
set(ONNXDP_FREE_FOLDERS tests bench)

# The CMake targets that build each layer (the link check; a layer without a target is skipped).
# exec/cuda/ is part of exec.
set(ONNXDP_TARGETS_graph onnxdp_graph)
set(ONNXDP_TARGETS_importer onnxdp_importer)
set(ONNXDP_TARGETS_parallel onnxdp_parallel onnxdp_parallel_impl)
set(ONNXDP_TARGETS_exec onnxdp_exec onnxdp_cuda)
set(ONNXDP_TARGETS_compile onnxdp_compile)
set(ONNXDP_TARGETS_train onnxdp_train)
set(ONNXDP_TARGETS_cli onnxdp)

# Includes that break the rules, "file -> included file" (paths from the source root): none since
# issue 21 (the last, exec/cuda -> parallel/shards.h, went when shards.h moved to graph/). The
# check fails on an entry that no longer matches any include. Do not add to it: fix the include.
set(ONNXDP_LAYERING_EXCEPTIONS
)

# Sets `out` to TRUE when a source of `layer` may include `path` (a file or folder, relative to
# the source root, e.g. "parallel/communicator.h" or "parallel"), else FALSE. A row entry that is
# a folder allows everything under it; an entry that is a file allows that file, and allows
# linking its folder's library.
function(onnxdp_layer_allows layer path out)
  string(REGEX REPLACE "/.*" "" folder "${path}")
  set(allowed FALSE)
  if(folder STREQUAL layer)
    set(allowed TRUE)
  endif()
  foreach(entry IN LISTS ONNXDP_MAY_INCLUDE_${layer})
    if(entry STREQUAL folder OR entry STREQUAL path OR (path STREQUAL folder AND entry MATCHES "^${folder}/"))
      set(allowed TRUE)
    endif()
  endforeach()
  set(${out} ${allowed} PARENT_SCOPE)
endfunction()

# Sets `out` to layer's row for messages: "exec/ (itself), graph/, parallel/communicator.h".
function(onnxdp_layer_row layer out)
  set(row "${layer}/ (itself)")
  foreach(entry IN LISTS ONNXDP_MAY_INCLUDE_${layer})
    if(NOT entry MATCHES "/")
      string(APPEND entry "/")  # a folder
    endif()
    string(APPEND row ", ${entry}")
  endforeach()
  set(${out} "${row}" PARENT_SCOPE)
endfunction()
