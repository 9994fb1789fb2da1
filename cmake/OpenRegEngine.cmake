# openreg_add_engine(<name> SOURCES <files...> [LINK <targets...>])
# Builds libopenreg_engine_<name>.so with hidden visibility and a version script
# that exports only openreg_engine_entry, and installs it next to libopenreg_core.
set(OPENREG_ENGINE_MAP ${CMAKE_CURRENT_LIST_DIR}/engine.map)

function(openreg_add_engine name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LINK" ${ARGN})
  set(target openreg_engine_${name})
  add_library(${target} SHARED ${ARG_SOURCES})
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR}/core/include)
  target_link_libraries(${target} PRIVATE ${ARG_LINK})
  set_target_properties(${target} PROPERTIES
    C_VISIBILITY_PRESET hidden
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    LINK_DEPENDS ${OPENREG_ENGINE_MAP}
    LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/engines)
  target_link_options(${target} PRIVATE
    "-Wl,--version-script=${OPENREG_ENGINE_MAP}" "-Wl,--no-undefined")
  install(TARGETS ${target} LIBRARY DESTINATION ${OPENREG_LIB_DIR})
endfunction()

# openreg_engine_option(<NAME> <found-var> <hint>): applies AUTO|ON|OFF.
# Sets OPENREG_BUILD_ENGINE_<NAME> in the caller.
function(openreg_engine_option NAME found hint)
  set(mode ${OPENREG_ENGINE_${NAME}})
  set(build OFF)
  if(mode STREQUAL "ON" AND NOT ${found})
    message(FATAL_ERROR "OPENREG_ENGINE_${NAME}=ON but its dependency is missing: ${hint}")
  elseif(mode STREQUAL "ON" OR (mode STREQUAL "AUTO" AND ${found}))
    set(build ON)
  elseif(mode STREQUAL "AUTO")
    message(STATUS "openreg: skipping engine ${NAME} (${hint})")
  endif()
  set(OPENREG_BUILD_ENGINE_${NAME} ${build} PARENT_SCOPE)
endfunction()
