# The include rule (scripts/check-includes.cmake) on a planted tree: an include from a room that is
# not used is refused with the file and the header named; allowed ones, the room's own and
# third-party headers pass. Run as: cmake -DSCRIPT=scripts/check-includes.cmake -DWORK=dir -P this
cmake_minimum_required(VERSION 3.25)
file(REMOVE_RECURSE "${WORK}")
file(WRITE "${WORK}/worker/model/good.hpp" "#include <vector>\n#include \"common/job_spec.hpp\"\n#include \"worker/model/other.hpp\"\n")
file(WRITE "${WORK}/worker/model/bad.cpp" "#include \"worker/model/good.hpp\"\n  #  include \"worker/train/trainer.hpp\"\n")

function(run_check files expect_ok)
  execute_process(COMMAND ${CMAKE_COMMAND} -DROOM=worker/model -DSOURCE_DIR=${WORK} "-DFILES=${files}"
                          "-DALLOWED=common|worker/math" -DSTAMP=${WORK}/stamp -P ${SCRIPT}
                  RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_VARIABLE out)
  if(expect_ok AND NOT rc EQUAL 0)
    message(FATAL_ERROR "allowed includes were refused:\n${err}")
  endif()
  if(NOT expect_ok)
    if(rc EQUAL 0)
      message(FATAL_ERROR "an include from worker/train/ passed the rule of worker/model/")
    endif()
    if(NOT err MATCHES "worker/model/bad.cpp includes worker/train/trainer.hpp")
      message(FATAL_ERROR "the refusal does not name the file and the header:\n${err}")
    endif()
    if(err MATCHES "good.hpp")
      message(FATAL_ERROR "an allowed file was named among the refused:\n${err}")
    endif()
  endif()
endfunction()

run_check("worker/model/good.hpp" TRUE)
if(NOT EXISTS "${WORK}/stamp")
  message(FATAL_ERROR "a passing check left no stamp")
endif()
file(REMOVE "${WORK}/stamp")
run_check("worker/model/good.hpp|worker/model/bad.cpp" FALSE)
if(EXISTS "${WORK}/stamp")
  message(FATAL_ERROR "a failing check left a stamp (the build would not run it again)")
endif()
file(REMOVE_RECURSE "${WORK}")
