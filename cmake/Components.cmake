# The process-group backends that need a library of their own (Gloo, MPI) are not in libminitrain but
# in libminitrain_gloo and libminitrain_mpi, installed as the components minitrain::gloo and
# minitrain::mpi: a program that links only minitrain::minitrain carries neither libgloo nor libmpi.
# They register themselves with distributed/process_group/backends.h when linked (Note [Backends register
# themselves] there: the link option below is what makes that robust for static libraries).
# In this tree both always exist; built without Gloo (or MPI) they hold the stub that says how to
# get it. They are installed only when the build has the real thing.
#
#   include(cmake/Components.cmake)   after MT_SOURCES is globbed: takes the backends' files out
#   mt_add_backend_components()       after the library targets exist: makes minitrain_gloo/_mpi
set(mt_pg_dir ${CMAKE_CURRENT_SOURCE_DIR}/distributed/process_group)
file(GLOB MT_GLOO_SOURCES CONFIGURE_DEPENDS ${mt_pg_dir}/gloo/*.cpp)
file(GLOB MT_MPI_SOURCES CONFIGURE_DEPENDS ${mt_pg_dir}/mpi/*.cpp)
list(REMOVE_ITEM MT_SOURCES ${MT_GLOO_SOURCES} ${MT_MPI_SOURCES})
# Each backend's folder holds the real thing, its stub (*_stub.cpp: the same class, saying how to get
# the library) and its registration (register_*.cpp). A build compiles the one or the other.
if(MT_HAVE_GLOO)
  list(REMOVE_ITEM MT_GLOO_SOURCES ${mt_pg_dir}/gloo/process_group_gloo_stub.cpp)
else()
  set(MT_GLOO_SOURCES ${mt_pg_dir}/gloo/process_group_gloo_stub.cpp ${mt_pg_dir}/gloo/register_gloo.cpp)
endif()
if(MT_HAVE_MPI)
  list(REMOVE_ITEM MT_MPI_SOURCES ${mt_pg_dir}/mpi/process_group_mpi_stub.cpp)
else()
  set(MT_MPI_SOURCES ${mt_pg_dir}/mpi/process_group_mpi_stub.cpp ${mt_pg_dir}/mpi/register_mpi.cpp)
endif()

# minitrain_<name> from `sources`; `found`: whether the build has the backend's library, `dependency`:
# the target to link for it. The component sits on the CPU library (minitrain_cpu in a CUDA build,
# whose shared objects are the same as minitrain's: a GPU program links minitrain::cuda first).
function(mt_backend_component name sources found dependency define)
  set(core minitrain)
  if(TARGET minitrain_cpu)
    set(core minitrain_cpu)
  endif()
  add_library(minitrain_${name} ${sources})
  target_link_libraries(minitrain_${name} PUBLIC ${core})
  if(found)
    target_compile_definitions(minitrain_${name} PRIVATE ${define}=1)
    target_link_libraries(minitrain_${name} PRIVATE ${dependency})
  endif()
  # Linking the component names its registration, so the linker keeps the object that defines it.
  target_link_options(minitrain_${name} INTERFACE "LINKER:--undefined=mt_process_group_${name}_registered")
  set_target_properties(minitrain_${name} PROPERTIES EXPORT_NAME ${name})
endfunction()

function(mt_add_backend_components)
  mt_backend_component(gloo "${MT_GLOO_SOURCES}" ${MT_HAVE_GLOO} gloo MT_HAVE_GLOO)
  mt_backend_component(mpi "${MT_MPI_SOURCES}" ${MT_HAVE_MPI} MPI::MPI_CXX MT_HAVE_MPI)
endfunction()
