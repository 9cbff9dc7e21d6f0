# Writes OUT, the git commit the source tree SOURCE_DIR is at, as a C macro for common/build_info.cpp;
# run by every build, and rewritten only when the commit changes, so that nothing else recompiles.
#   cmake -DSOURCE_DIR=DIR -DOUT=FILE -P build-commit.cmake
# "unknown" outside a git checkout (a source archive); "-dirty" when files differ from the commit.
cmake_minimum_required(VERSION 3.25)
execute_process(COMMAND git -C "${SOURCE_DIR}" describe --always --dirty --abbrev=12
                OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR commit STREQUAL "")
  set(commit "unknown")
endif()
set(text "#define XTRAIN_BUILD_COMMIT \"${commit}\"\n")
set(old "")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()
