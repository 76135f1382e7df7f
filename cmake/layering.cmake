# The link half of the layering (the include half is cmake/check_includes.cmake, CTest test
# layering_includes). Included from CMakeLists.txt; when the whole project is configured, each
# layer's targets (ONNXDP_TARGETS_<layer> in cmake/layers.cmake) must link only targets of their
# own layer or of the layers their row allows: configuring fails naming the target and the link.

include(${CMAKE_CURRENT_LIST_DIR}/layers.cmake)

function(onnxdp_check_layer_links)
  set(problems "")
  foreach(layer IN LISTS ONNXDP_LAYERS)
    foreach(target IN LISTS ONNXDP_TARGETS_${layer})
      if(NOT TARGET ${target})
        continue()
      endif()
      # What it links itself and what it passes on: PRIVATE links show as $<LINK_ONLY:x> in the second.
      get_target_property(links ${target} LINK_LIBRARIES)
      get_target_property(interface_links ${target} INTERFACE_LINK_LIBRARIES)
      foreach(link IN LISTS links interface_links)
        string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" link "${link}")
        foreach(other IN LISTS ONNXDP_LAYERS)
          if(NOT link IN_LIST ONNXDP_TARGETS_${other})
            continue()
          endif()
          onnxdp_layer_allows(${layer} ${other} allowed)
          if(NOT allowed)
            onnxdp_layer_row(${layer} row)
            list(APPEND problems "${target} (${layer}/) links ${link} (${other}/): ${layer}/ may use only ${row}")
          endif()
        endforeach()
      endforeach()
    endforeach()
  endforeach()
  if(problems)
    list(REMOVE_DUPLICATES problems)
    list(JOIN problems "\n" text)
    message("${text}")
    message(FATAL_ERROR "layering: these links break the rules of cmake/layers.cmake "
                        "(docs/DESIGN.md, \"Folders\")")
  endif()
endfunction()
cmake_language(DEFER DIRECTORY ${CMAKE_SOURCE_DIR} CALL onnxdp_check_layer_links)
