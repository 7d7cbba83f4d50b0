# One static library per part (DESIGN.md's table), linked to the parts it may know. A part sees only the headers of
# itself and of those parts: its include root in the build tree holds links to their header folders and nothing
# else, so an #include of a part it must not know (one that uses it) fails to compile.
#
#   df_part(NAME SOURCES files... HEADERS paths-under-include/... [PRIVATE paths-under-src/...] [DEPS parts...]
#           [LIBS targets...])
function(df_link_into root rel target)
  set(link ${root}/${rel})
  get_filename_component(parent ${link} DIRECTORY)
  file(MAKE_DIRECTORY ${parent})
  if(IS_SYMLINK ${link})
    file(REMOVE ${link})
  endif()
  file(CREATE_LINK ${target} ${link} SYMBOLIC)
endfunction()

function(df_part name)
  cmake_parse_arguments(P "" "" "SOURCES;HEADERS;PRIVATE;DEPS;LIBS" ${ARGN})
  set(root ${CMAKE_BINARY_DIR}/parts/${name})
  foreach(h ${P_HEADERS})
    df_link_into(${root}/include ${h} ${PROJECT_SOURCE_DIR}/include/${h})
  endforeach()
  foreach(d ${P_PRIVATE})
    df_link_into(${root}/src ${d} ${PROJECT_SOURCE_DIR}/src/${d})
  endforeach()
  add_library(df_${name} STATIC ${P_SOURCES})
  target_include_directories(df_${name} PUBLIC ${root}/include PRIVATE ${root}/src)
  foreach(d ${P_DEPS})
    target_link_libraries(df_${name} PUBLIC df_${d})
  endforeach()
  target_link_libraries(df_${name} PUBLIC ${P_LIBS})
  # The CPU kernels fix every rounding step to match llama.cpp's; a compiler must not fuse a multiply and an add on
  # its own (GCC does in C++ modes wherever a function is built for FMA).
  target_compile_options(df_${name} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-ffp-contract=off>)
  df_warnings(df_${name})
  set_property(GLOBAL APPEND PROPERTY DF_PARTS df_${name})
endfunction()

# Tests that the walls hold: each probe compiles one #include as code of a part would (with the part's include
# roots); one a part must not know has to fail, one it may know has to pass. The probes are built by the tests, not
# by the normal build, one at a time (they share the build directory).
function(df_layering_probe part header expect)
  string(MAKE_C_IDENTIFIER "${header}" hid)
  set(id ${part}_${hid})
  set(src ${CMAKE_BINARY_DIR}/layering/${id}.cpp)
  file(WRITE ${src} "#include \"${header}\"\n")
  add_library(layering_${id} OBJECT EXCLUDE_FROM_ALL ${src})
  target_link_libraries(layering_${id} PRIVATE df_${part})
  add_test(NAME Layering.${part}_includes_${hid}_${expect}
           COMMAND ${CMAKE_COMMAND} --build ${CMAKE_BINARY_DIR} --target layering_${id})
  set_tests_properties(Layering.${part}_includes_${hid}_${expect} PROPERTIES LABELS layering RESOURCE_LOCK build_tree)
  if(expect STREQUAL "fails")  # and for the right reason: the header is not there for this part
    set_tests_properties(Layering.${part}_includes_${hid}_${expect} PROPERTIES
                         PASS_REGULAR_EXPRESSION "${header}: No such file or directory")
  endif()
endfunction()
