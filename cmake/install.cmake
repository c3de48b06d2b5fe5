# SPDX-License-Identifier: Apache-2.0
# What `cmake --install` adds to the targets each directory installs: the
# public headers, the configurations, the CMake package, ecc.pc, the license
# and the manual pages, each rule in a component, so that a layout can be
# checked without building (scripts/install-check.sh).
install(FILES ${PROJECT_SOURCE_DIR}/abi/ecc_common.h ${PROJECT_SOURCE_DIR}/abi/ecc_plugin.h
              ${PROJECT_SOURCE_DIR}/abi/ecc_plugin_v1.h
              ${PROJECT_SOURCE_DIR}/host-shim/include/ecc_host.h
        DESTINATION ${ECC_INSTALL_HEADER_DIR} COMPONENT development)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/conf/ DESTINATION ${ECC_INSTALL_CONFIG_DIR}
        COMPONENT config FILES_MATCHING PATTERN "*.ini")

# ---- the CMake package: find_package(ecc CONFIG) gives ecc::host ----
include(CMakePackageConfigHelpers)
set(ECC_PACKAGE_DIR ${CMAKE_BINARY_DIR}/package)
install(EXPORT eccTargets NAMESPACE ecc:: FILE eccTargets.cmake
        DESTINATION ${ECC_INSTALL_CMAKE_DIR} COMPONENT development)
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/eccConfig.cmake.in
  ${ECC_PACKAGE_DIR}/eccConfig.cmake
  INSTALL_DESTINATION ${ECC_INSTALL_CMAKE_DIR}
  PATH_VARS ECC_INSTALL_PLUGIN_DIR ECC_INSTALL_CONFIG_DIR)
write_basic_package_version_file(${ECC_PACKAGE_DIR}/eccConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${ECC_PACKAGE_DIR}/eccConfig.cmake ${ECC_PACKAGE_DIR}/eccConfigVersion.cmake
        DESTINATION ${ECC_INSTALL_CMAKE_DIR} COMPONENT development)

# ---- pkg-config: ecc.pc ----
# `cmake --install --prefix DIR` picks the prefix after configuring, and the
# file must name the one installed to (the CMake package finds its own), so
# the prefix is written in when installing and everything else now.
function(ecc_pc_path out dir)
  if(IS_ABSOLUTE "${dir}")
    set(${out} "${dir}" PARENT_SCOPE)
  else()
    set(${out} "\${prefix}/${dir}" PARENT_SCOPE)
  endif()
endfunction()
ecc_pc_path(ECC_PC_LIBDIR ${CMAKE_INSTALL_LIBDIR})
ecc_pc_path(ECC_PC_INCLUDEDIR ${CMAKE_INSTALL_INCLUDEDIR})
ecc_pc_path(ECC_PC_CONFIGDIR ${ECC_INSTALL_CONFIG_DIR})
set(ECC_PC_PREFIX "@ECC_PC_PREFIX@") # left for the second pass, at install time
configure_file(${CMAKE_CURRENT_LIST_DIR}/ecc.pc.in ${ECC_PACKAGE_DIR}/ecc.pc.in @ONLY)
install(CODE "set(ECC_PC_PREFIX \"\${CMAKE_INSTALL_PREFIX}\")
  configure_file(\"${ECC_PACKAGE_DIR}/ecc.pc.in\" \"${ECC_PACKAGE_DIR}/ecc.pc\" @ONLY)"
  COMPONENT development)
install(FILES ${ECC_PACKAGE_DIR}/ecc.pc DESTINATION ${ECC_INSTALL_PC_DIR} COMPONENT development)

# ---- documentation: the license ----
install(FILES ${PROJECT_SOURCE_DIR}/LICENSE DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT doc)

# ---- manual pages: eccctl(1), ecc_host(3), and ecc_open(3) and the like ----
set(ECC_MAN_DIR ${CMAKE_BINARY_DIR}/man)
configure_file(${PROJECT_SOURCE_DIR}/docs/man/eccctl.1.in ${ECC_MAN_DIR}/man1/eccctl.1 @ONLY)
configure_file(${PROJECT_SOURCE_DIR}/docs/man/ecc_host.3.in ${ECC_MAN_DIR}/man3/ecc_host.3 @ONLY)
# Every function ecc_host.h declares gets a page that sources ecc_host(3).
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
             ${PROJECT_SOURCE_DIR}/host-shim/include/ecc_host.h)
file(STRINGS ${PROJECT_SOURCE_DIR}/host-shim/include/ecc_host.h ECC_DECLARATIONS
     REGEX "^(int|size_t|const char) \\*?ecc_[a-z_]+\\(")
foreach(line IN LISTS ECC_DECLARATIONS)
  string(REGEX MATCH "ecc_[a-z_]+" fn "${line}")
  file(CONFIGURE OUTPUT ${ECC_MAN_DIR}/man3/${fn}.3 CONTENT ".so man3/ecc_host.3\n")
endforeach()
install(DIRECTORY ${ECC_MAN_DIR}/ DESTINATION ${CMAKE_INSTALL_MANDIR} COMPONENT man)
