# The runtime as embedders get it from `cmake --install` (docs/embedding.md):
# libmoert, shared and static, each holding the whole runtime (the C and C++
# APIs, the CPU and CUDA backends, .npy I/O), the public headers, the CMake
# package `moert` (targets moert::moert and moert::moert_static, the latter
# the component `static`), moert.pc (C) and moert-cxx.pc (C++).
# Included from runtime/CMakeLists.txt, after every runtime library.
#
# What a consumer's machine needs differs per library: libmoert.so keeps
# the static CUDA runtime inside and opens the CUDA driver, cuBLAS and NCCL
# at run time, so linking it needs no CUDA toolkit; libmoert.a leaves the
# static CUDA runtime (libcudart_static.a) to the program. Each library is
# therefore its own export set, and moertConfig.cmake loads the static one
# only where what it links is found.

include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# The runtime's static libraries, whose objects the installed libraries
# gather (position-independent, for the shared one): one per layer. The plan
# writer and moec inspect's dumps are the compiler's and stay out.
set(MOERT_DIST_PARTS moert_api moert_observe moert_generate moert_multidevice
  moert_tiers moert_kernels moert_exec moert_loader moert_format moert_cuda
  moert_cuda_launch)
set_target_properties(${MOERT_DIST_PARTS} PROPERTIES
  POSITION_INDEPENDENT_CODE ON)
set(MOERT_DIST_OBJECTS)
foreach(part ${MOERT_DIST_PARTS})
  list(APPEND MOERT_DIST_OBJECTS $<TARGET_OBJECTS:${part}>)
endforeach()

# oneDNN and libgomp are found by hand (runtime/CMakeLists.txt); imported
# targets let the exported static library name them, and moertConfig.cmake
# defines them again on the embedder's machine.
add_library(moert::dnnl UNKNOWN IMPORTED GLOBAL)
set_target_properties(moert::dnnl PROPERTIES IMPORTED_LOCATION ${MOERT_DNNL})
add_library(moert::gomp UNKNOWN IMPORTED GLOBAL)
set_target_properties(moert::gomp PROPERTIES IMPORTED_LOCATION ${MOERT_GOMP})

# What the objects link: Abseil is public (moert.h returns absl::Status),
# the rest private. The C API (moert_c.h) exposes none of it.
set(MOERT_DIST_PUBLIC absl::status absl::statusor absl::strings)
set(MOERT_DIST_PRIVATE absl::str_format ZLIB::ZLIB moert::deflate moert::dnnl
  moert::gomp Threads::Threads)
# Open MPI by its libraries, as moertConfig.cmake names them again: FindMPI's
# C component needs the consumer to enable C.
set(MOERT_CONFIG_MPI OFF)
if(MPI_C_FOUND)
  add_library(moert::mpi INTERFACE IMPORTED GLOBAL)
  set_target_properties(moert::mpi PROPERTIES
    INTERFACE_LINK_LIBRARIES "${MPI_C_LIBRARIES}")
  list(APPEND MOERT_DIST_PRIVATE moert::mpi)
  set(MOERT_CONFIG_MPI ON)
endif()
if(MOERT_CUDA)
  list(APPEND MOERT_DIST_PRIVATE CUDA::cudart_static ${CMAKE_DL_LIBS})
endif()
# The image decoders of moe-run --image, by their libraries (moertConfig.cmake
# and moert.pc name them again).
set(MOERT_CONFIG_IMAGE_LIBS "")
foreach(found PNG JPEG)
  if(${found}_FOUND)
    list(APPEND MOERT_DIST_PRIVATE ${${found}_LIBRARIES})
    list(APPEND MOERT_CONFIG_IMAGE_LIBS ${${found}_LIBRARIES})
  endif()
endforeach()

set(MOERT_DIST_INCLUDE
  $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/include>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)

add_library(moert_shared SHARED ${MOERT_DIST_OBJECTS})
set_target_properties(moert_shared PROPERTIES OUTPUT_NAME moert
  EXPORT_NAME moert VERSION ${PROJECT_VERSION}
  SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR}
  INSTALL_RPATH_USE_LINK_PATH TRUE)
target_include_directories(moert_shared PUBLIC ${MOERT_DIST_INCLUDE})
target_compile_features(moert_shared PUBLIC cxx_std_17)
target_link_libraries(moert_shared PUBLIC ${MOERT_DIST_PUBLIC}
  PRIVATE ${MOERT_DIST_PRIVATE})
# The static CUDA runtime stays inside; every symbol the objects use must be
# resolved here (sanitized builds leave the sanitizer's to the executable).
target_link_options(moert_shared PRIVATE "LINKER:--exclude-libs,ALL")
if(NOT MOEC_SANITIZE)
  target_link_options(moert_shared PRIVATE "LINKER:--no-undefined")
endif()

# libmoert.a, written next to this file (build/lib holds the layers'
# archives).
add_library(moert_static STATIC ${MOERT_DIST_OBJECTS})
set_target_properties(moert_static PROPERTIES OUTPUT_NAME moert
  EXPORT_NAME moert_static
  ARCHIVE_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/dist)
target_include_directories(moert_static PUBLIC ${MOERT_DIST_INCLUDE})
target_compile_features(moert_static PUBLIC cxx_std_17)
target_link_libraries(moert_static PUBLIC ${MOERT_DIST_PUBLIC}
  PRIVATE ${MOERT_DIST_PRIVATE})

set(MOERT_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/moert)
install(TARGETS moert_shared EXPORT moertTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS moert_static EXPORT moertStaticTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
# moe-run keeps Open MPI's library directory on its installed run path.
set_target_properties(moe-run PROPERTIES INSTALL_RPATH_USE_LINK_PATH TRUE)
install(TARGETS moe-run RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# runtime/include/moert is the API and nothing else: the headers the layers
# share live in their folders (format/, src/).
install(DIRECTORY include/moert DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.h")
install(EXPORT moertTargets NAMESPACE moert:: DESTINATION ${MOERT_CMAKE_DIR})
install(EXPORT moertStaticTargets NAMESPACE moert::
  DESTINATION ${MOERT_CMAKE_DIR})

# moertConfig.cmake finds what the static library links; the build's
# locations are its hints.
set(MOERT_CONFIG_CUDA OFF)
if(MOERT_CUDA)
  set(MOERT_CONFIG_CUDA ON)
endif()
get_filename_component(MOERT_DEFLATE_HINT ${MOERT_DEFLATE} DIRECTORY)
get_filename_component(MOERT_DNNL_HINT ${MOERT_DNNL} DIRECTORY)
get_filename_component(MOERT_GOMP_HINT ${MOERT_GOMP} DIRECTORY)
configure_package_config_file(cmake/moertConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/moertConfig.cmake
  INSTALL_DESTINATION ${MOERT_CMAKE_DIR})
# Before 1.0 a minor version may change the API.
write_basic_package_version_file(
  ${CMAKE_CURRENT_BINARY_DIR}/moertConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/moertConfig.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/moertConfigVersion.cmake
  DESTINATION ${MOERT_CMAKE_DIR})

# moert.pc (the C API: -lmoert and nothing else) and moert-cxx.pc (the C++
# API: moert plus the Abseil libraries moert.h's absl::Status needs),
# relocatable: their prefix is found from the file's own directory.
file(RELATIVE_PATH MOERT_PC_PREFIX
  /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
string(REGEX REPLACE "/$" "" MOERT_PC_PREFIX "${MOERT_PC_PREFIX}")
set(MOERT_PC_LIBS_PRIVATE
  "${MOERT_DEFLATE} ${MOERT_DNNL} ${MOERT_GOMP} -pthread")
if(MPI_C_FOUND)
  string(JOIN " " MOERT_PC_MPI ${MPI_C_LIBRARIES})
  string(APPEND MOERT_PC_LIBS_PRIVATE " ${MOERT_PC_MPI}")
endif()
if(MOERT_CUDA)
  string(APPEND MOERT_PC_LIBS_PRIVATE
    " ${CUDA_cudart_static_LIBRARY} -ldl -lrt")
endif()
if(MOERT_CONFIG_IMAGE_LIBS)
  string(JOIN " " MOERT_PC_IMAGE ${MOERT_CONFIG_IMAGE_LIBS})
  string(APPEND MOERT_PC_LIBS_PRIVATE " ${MOERT_PC_IMAGE}")
endif()
configure_file(cmake/moert.pc.in ${CMAKE_CURRENT_BINARY_DIR}/moert.pc @ONLY)
configure_file(cmake/moert-cxx.pc.in ${CMAKE_CURRENT_BINARY_DIR}/moert-cxx.pc
  @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/moert.pc
  ${CMAKE_CURRENT_BINARY_DIR}/moert-cxx.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
