# openreg_add_engine(<name> SOURCES <files...> [LINK <targets...>])
#
# Builds libopenreg_engine_<name>.so: C++17, the SDK headers (target openreg::sdk),
# hidden visibility and a version script, so the library exports only
# openreg_engine_entry, and -Wl,--no-undefined, so a missing symbol fails the
# link instead of the dlopen. One file for both uses:
#  - in the openreg source tree (the top CMakeLists defines openreg::sdk, puts the
#    engines next to libopenreg_core in the build tree and installs them into the
#    package);
#  - out of tree, through find_package(openreg) (openregConfig.cmake defines
#    openreg::sdk on the installed headers; the engine lands in the caller's build
#    folder, or OPENREG_ENGINE_OUTPUT_DIRECTORY if set).
if(NOT DEFINED OPENREG_ENGINE_MAP)
  set(OPENREG_ENGINE_MAP ${CMAKE_CURRENT_LIST_DIR}/engine.map)
endif()

function(openreg_add_engine name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LINK" ${ARGN})
  if(NOT ARG_SOURCES)
    message(FATAL_ERROR "openreg_add_engine(${name}): no SOURCES given")
  endif()
  if(NOT name MATCHES "^[a-z0-9_]+$")
    message(FATAL_ERROR "openreg_add_engine(${name}): engine names are [a-z0-9_]+ (the file is libopenreg_engine_<name>.so)")
  endif()
  set(target openreg_engine_${name})
  add_library(${target} SHARED ${ARG_SOURCES})
  target_link_libraries(${target} PRIVATE openreg::sdk ${ARG_LINK})
  target_compile_features(${target} PRIVATE cxx_std_17)
  set_target_properties(${target} PROPERTIES
    PREFIX "lib"
    SUFFIX ".so"
    C_VISIBILITY_PRESET hidden
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    POSITION_INDEPENDENT_CODE ON
    LINK_DEPENDS ${OPENREG_ENGINE_MAP})
  # An engine built without optimisation is 10-50x slower and looks broken in
  # benchmarks: with no build type chosen, build it optimised anyway.
  if(NOT CMAKE_BUILD_TYPE AND NOT CMAKE_CONFIGURATION_TYPES)
    target_compile_options(${target} PRIVATE -O2)
  endif()
  if(OPENREG_ENGINE_OUTPUT_DIRECTORY)
    set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${OPENREG_ENGINE_OUTPUT_DIRECTORY})
  endif()
  target_link_options(${target} PRIVATE
    "-Wl,--version-script=${OPENREG_ENGINE_MAP}" "-Wl,--no-undefined")
  set_property(GLOBAL APPEND PROPERTY OPENREG_ENGINE_TARGETS ${target})
  if(OPENREG_ENGINE_INSTALL_DIR)
    install(TARGETS ${target} LIBRARY DESTINATION ${OPENREG_ENGINE_INSTALL_DIR})
  endif()
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
