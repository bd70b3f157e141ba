# `cmake --install` puts the library, its public headers, a CMake package config and the mini_train
# program (PREFIX/bin) under the prefix, so that an out-of-tree project can do:
#   find_package(minitrain REQUIRED)                  # COMPONENTS cuda gloo mpi: minitrain::cuda, ::gloo, ::mpi
#   target_link_libraries(app PRIVATE minitrain::minitrain)
# tests/install/ proves it by building a tiny consumer against an installed copy.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# A CUDA build installs both libraries (Note [Two libraries in a CUDA build] in CMakeLists.txt):
#   find_package(minitrain)                    minitrain::minitrain, the CPU library (no CUDA needed)
#   find_package(minitrain COMPONENTS cuda)    minitrain::cuda as well: everything plus the CUDA
#                                              backend and NCCL; link it instead of minitrain::minitrain
set(mt_installed_libraries minitrain)
if(TARGET minitrain_cpu)
  list(APPEND mt_installed_libraries minitrain_cpu)
endif()
install(TARGETS ${mt_installed_libraries} EXPORT minitrainTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS mini_train RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# The backend components (cmake/Components.cmake), each in an export set of its own, read by
# minitrainConfig.cmake only when asked for: find_package(minitrain COMPONENTS gloo mpi) gives
# minitrain::gloo and minitrain::mpi; link them beside minitrain::minitrain (or ::cuda). Installed
# only where the build has the backend's library.
foreach(component gloo mpi)
  string(TOUPPER ${component} upper)
  if(MT_HAVE_${upper})
    install(TARGETS minitrain_${component} EXPORT minitrain_${component}Targets
            ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
    install(EXPORT minitrain_${component}Targets NAMESPACE minitrain::
            DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/minitrain)
  endif()
endforeach()

# Public headers keep their layer folders: #include "tensor/tensor.h" works the same installed.
install(FILES minitrain.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/minitrain)
# Only public headers: not the detail/ folders (no layer lists them), nor the backends' own folders,
# which only the library's sources include (docs/design.md, "Public headers"; scripts/check_layers.py).
foreach(layer IN LISTS MT_LAYERS)
  if(layer STREQUAL "tensor/cpu" OR layer STREQUAL "tensor/cuda")
    continue()
  endif()
  file(GLOB layer_headers ${CMAKE_CURRENT_SOURCE_DIR}/${layer}/*.h)
  install(FILES ${layer_headers} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/minitrain/${layer})
endforeach()

install(EXPORT minitrainTargets NAMESPACE minitrain:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/minitrain)
configure_package_config_file(cmake/minitrainConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/minitrainConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/minitrain)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/minitrainConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/minitrainConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/minitrainConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/minitrain)
