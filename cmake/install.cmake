# The install layout: `cmake --install <build> [--prefix <dir>]` lays out
#
#   include/uform.h
#   <libdir>/libuform.so.MAJOR.MINOR.PATCH, libuform.so.MAJOR, libuform.so, libuform.a
#   <libdir>/cmake/uform/uformConfig.cmake, uformConfigVersion.cmake, uformTargets*.cmake
#   <libdir>/pkgconfig/uform.pc
#   bin/uform
#
# Consumers: `find_package(uform)` then link `uform::uform` (shared) or `uform::uform_static`;
# or `pkg-config --cflags --libs uform` (add `--static` for the archive). Both are relocatable:
# the files find the prefix from where they lie, so `--prefix` and DESTDIR work after configure.
include(CMakePackageConfigHelpers)

set(UFORM_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/uform CACHE STRING
    "Where uformConfig.cmake goes, relative to the prefix")
mark_as_advanced(UFORM_INSTALL_CMAKEDIR)

# The archive's private dependencies reach static consumers through its INTERFACE_LINK_LIBRARIES as
# imported targets (`numa::numa`, ...; see CMakeLists.txt), which uformConfig.cmake defines again.
install(TARGETS uform uform_static EXPORT uformTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES ${PROJECT_SOURCE_DIR}/include/uform.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS uform_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

install(EXPORT uformTargets NAMESPACE uform:: DESTINATION ${UFORM_INSTALL_CMAKEDIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/uformConfig.cmake.in
  ${PROJECT_BINARY_DIR}/uformConfig.cmake INSTALL_DESTINATION ${UFORM_INSTALL_CMAKEDIR})
# Before 1.0 a minor release may break the ABI, so only the same MAJOR.MINOR is compatible.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/uformConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/uformConfig.cmake ${PROJECT_BINARY_DIR}/uformConfigVersion.cmake
  DESTINATION ${UFORM_INSTALL_CMAKEDIR})

# pkg-config: the prefix is derived from `${pcfiledir}`, so the file stays right wherever the tree
# is installed or moved. Absolute install directories are written as they are.
set(_uform_pc_dir ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
if(IS_ABSOLUTE "${_uform_pc_dir}")
  set(UFORM_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH _uform_pc_up "/uform-root/${_uform_pc_dir}" "/uform-root")
  string(REGEX REPLACE "/$" "" _uform_pc_up "${_uform_pc_up}")
  set(UFORM_PC_PREFIX "\${pcfiledir}/${_uform_pc_up}")
endif()
foreach(_dir INCLUDEDIR LIBDIR)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_${_dir}}")
    set(UFORM_PC_${_dir} "${CMAKE_INSTALL_${_dir}}")
  else()
    set(UFORM_PC_${_dir} "\${prefix}/${CMAKE_INSTALL_${_dir}}")
  endif()
endforeach()
configure_file(${PROJECT_SOURCE_DIR}/cmake/uform.pc.in ${PROJECT_BINARY_DIR}/uform.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/uform.pc DESTINATION ${_uform_pc_dir})
