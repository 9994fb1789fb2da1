# Installs the engine SDK into the Python package (site-packages/openreg/):
#   include/openreg/engine.h, dtype_name.h, include/openreg/sdk.hpp, include/openreg/sdk/*.hpp
#   share/cmake/openreg/{openregConfig,openregConfigVersion,OpenRegEngine}.cmake, engine.map
# `python -m openreg cmake-prefix-path` prints site-packages/openreg, the prefix
# find_package(openreg) needs.
include(CMakePackageConfigHelpers)

set(OPENREG_INSTALL_INCLUDE_DIR ${OPENREG_PKG_DIR}/include)
set(OPENREG_INSTALL_CMAKE_DIR ${OPENREG_PKG_DIR}/share/cmake/openreg)
file(STRINGS ${PROJECT_SOURCE_DIR}/core/include/openreg/engine.h _abi_major REGEX "define OPENREG_ABI_VERSION_MAJOR")
file(STRINGS ${PROJECT_SOURCE_DIR}/core/include/openreg/engine.h _abi_minor REGEX "define OPENREG_ABI_VERSION_MINOR")
string(REGEX MATCH "MAJOR ([0-9]+)" _m "${_abi_major}")
set(_major ${CMAKE_MATCH_1})
string(REGEX MATCH "MINOR ([0-9]+)" _m "${_abi_minor}")
set(OPENREG_ABI_VERSION "${_major}.${CMAKE_MATCH_1}")

# The config is relocatable (paths relative to itself), so the package works
# wherever pip puts site-packages. PATH_VARS are relative to the install prefix,
# which for the config is site-packages/ (scikit-build-core's platlib).
configure_package_config_file(
  ${PROJECT_SOURCE_DIR}/cmake/openregConfig.cmake.in
  ${PROJECT_BINARY_DIR}/sdk/openregConfig.cmake
  INSTALL_DESTINATION ${OPENREG_INSTALL_CMAKE_DIR}
  PATH_VARS OPENREG_INSTALL_INCLUDE_DIR)
write_basic_package_version_file(
  ${PROJECT_BINARY_DIR}/sdk/openregConfigVersion.cmake
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY SameMajorVersion)

install(FILES ${PROJECT_SOURCE_DIR}/core/include/openreg/engine.h
              ${PROJECT_SOURCE_DIR}/core/include/openreg/dtype_name.h
              ${PROJECT_SOURCE_DIR}/engines/common/include/openreg/sdk.hpp
        DESTINATION ${OPENREG_INSTALL_INCLUDE_DIR}/openreg)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/engines/common/include/openreg/sdk
        DESTINATION ${OPENREG_INSTALL_INCLUDE_DIR}/openreg
        FILES_MATCHING PATTERN "*.hpp")
install(FILES ${PROJECT_BINARY_DIR}/sdk/openregConfig.cmake
              ${PROJECT_BINARY_DIR}/sdk/openregConfigVersion.cmake
              ${PROJECT_SOURCE_DIR}/cmake/OpenRegEngine.cmake
              ${PROJECT_SOURCE_DIR}/cmake/engine.map
        DESTINATION ${OPENREG_INSTALL_CMAKE_DIR})
