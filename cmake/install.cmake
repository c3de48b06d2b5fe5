# SPDX-License-Identifier: Apache-2.0
# What `cmake --install` adds to the targets each directory installs: the
# public headers and the configurations, each rule in a component, so that a
# layout can be checked without building (scripts/install-check.sh).
install(FILES ${PROJECT_SOURCE_DIR}/abi/ecc_common.h ${PROJECT_SOURCE_DIR}/abi/ecc_plugin.h
              ${PROJECT_SOURCE_DIR}/abi/ecc_plugin_v1.h
              ${PROJECT_SOURCE_DIR}/host-shim/include/ecc_host.h
        DESTINATION ${ECC_INSTALL_HEADER_DIR} COMPONENT development)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/conf/ DESTINATION ${ECC_INSTALL_CONFIG_DIR}
        COMPONENT config FILES_MATCHING PATTERN "*.ini")
