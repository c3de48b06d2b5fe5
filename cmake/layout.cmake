# SPDX-License-Identifier: Apache-2.0
# Where an install puts each part, decided once for the whole build, and the
# private header that carries the version and the configuration directory
# into the code (the one place either is written down is here and project()).
include(GNUInstallDirs)

set(ECC_INSTALL_PLUGIN_DIR ${CMAKE_INSTALL_LIBDIR}/ecc)
set(ECC_INSTALL_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/ecc)
set(ECC_INSTALL_PC_DIR ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
set(ECC_INSTALL_HEADER_DIR ${CMAKE_INSTALL_INCLUDEDIR}/ecc)

# GNUInstallDirs maps the configuration directory of prefix /usr to /etc
# (and /opt/X to /etc/opt/X) in its FULL form only. Where that mapping
# applies the configs go to the absolute path; elsewhere the relative one is
# used, so that `cmake --install --prefix DIR` keeps them inside DIR.
set(ECC_FULL_CONFIG_DIR ${CMAKE_INSTALL_FULL_SYSCONFDIR}/ecc)
if(CMAKE_INSTALL_FULL_SYSCONFDIR STREQUAL "${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_SYSCONFDIR}")
  set(ECC_INSTALL_CONFIG_DIR ${CMAKE_INSTALL_SYSCONFDIR}/ecc)
else()
  set(ECC_INSTALL_CONFIG_DIR ${ECC_FULL_CONFIG_DIR})
endif()

# The absolute paths, as the manual pages and eccctl --help name them.
set(ECC_FULL_PLUGIN_DIR ${CMAKE_INSTALL_FULL_LIBDIR}/ecc)
set(ECC_FULL_HEADER_DIR ${CMAKE_INSTALL_FULL_INCLUDEDIR}/ecc)
set(ECC_FULL_DOC_DIR ${CMAKE_INSTALL_FULL_DOCDIR})

set(ECC_GENERATED_DIR ${CMAKE_BINARY_DIR}/generated)
configure_file(${CMAKE_CURRENT_LIST_DIR}/ecc_build_info.h.in
               ${ECC_GENERATED_DIR}/ecc_build_info.h @ONLY)
