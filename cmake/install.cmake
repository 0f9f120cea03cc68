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

# The archive's private dependencies reach static consumers through its INTERFACE_LINK_LIBRARIES.
# libnuma, libcjson, libutf8proc, libdnnl, libjpeg and libspng are absolute paths of this build machine
# there; the installed package names them `numa`, `cjson`, `utf8proc`, `dnnl`, `jpeg` and `spng` instead,
# so a consumer links its own machine's.
get_target_property(_uform_static_interface uform_static INTERFACE_LINK_LIBRARIES)
if(_uform_static_interface)
  set(_uform_static_exported "")
  foreach(_item IN LISTS _uform_static_interface)
    set(_uform_exported_name "")
    foreach(_dep numa:NUMA_LIBRARY cjson:CJSON_LIBRARY utf8proc:UTF8PROC_LIBRARY dnnl:DNNL_LIBRARY jpeg:JPEG_LIBRARY spng:SPNG_LIBRARY)
      string(REPLACE ":" ";" _dep "${_dep}")
      list(GET _dep 0 _dep_name)
      list(GET _dep 1 _dep_variable)
      if(_item STREQUAL ${_dep_variable} OR _item STREQUAL "$<LINK_ONLY:${${_dep_variable}}>")
        set(_uform_exported_name ${_dep_name})
      endif()
    endforeach()
    if(_uform_exported_name)
      list(APPEND _uform_static_exported "$<BUILD_INTERFACE:${_item}>" "$<INSTALL_INTERFACE:$<LINK_ONLY:${_uform_exported_name}>>")
    else()
      list(APPEND _uform_static_exported "${_item}")
    endif()
  endforeach()
  set_target_properties(uform_static PROPERTIES INTERFACE_LINK_LIBRARIES "${_uform_static_exported}")
endif()

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
