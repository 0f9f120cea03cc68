# Finds a header that a Debian package ships, or fails the configure naming the package. CMake never
# installs anything: `./build.sh` installs what is missing (its `need` list) before configuring.
function(uform_require_debian_package variable header package)
  find_path(${variable} NAMES ${header})
  if(NOT ${variable})
    message(FATAL_ERROR "uform needs ${header} from the Debian package ${package}: run ./build.sh, which "
                        "installs the packages it needs, or install ${package} yourself")
  endif()
  set(${variable} ${${variable}} PARENT_SCOPE)
endfunction()
