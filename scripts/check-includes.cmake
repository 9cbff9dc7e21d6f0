# Fails when a file of one room includes a header from a room that the room does not use.
# Run by the build for every room (xtrain_room in CMakeLists.txt), whenever one of its files changes:
#   cmake -DROOM=worker/train -DFILES="a.cpp|b.hpp" -DALLOWED="common|worker/model" -DSTAMP=f -P this
# FILES are relative to the source tree. A quoted include whose path starts with one of the
# project's top-level folders must come from the room's own folders (those its files sit in) or
# from an ALLOWED one; system and third-party headers (<...>) are not the rule's business.
cmake_minimum_required(VERSION 3.25)
string(REPLACE "|" ";" files "${FILES}")
string(REPLACE "|" ";" allowed "${ALLOWED}")
foreach(file ${files})
  get_filename_component(dir "${file}" DIRECTORY)
  list(APPEND allowed "${dir}")
endforeach()
list(REMOVE_DUPLICATES allowed)
list(JOIN allowed ", " allowed_text)

set(errors "")
foreach(file ${files})
  file(STRINGS "${SOURCE_DIR}/${file}" lines REGEX "^[ \t]*#[ \t]*include[ \t]+\"")
  foreach(line ${lines})
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]+\"([^\"]+)\".*" "\\1" header "${line}")
    if(NOT header MATCHES "^(common|worker|cuda|launcher|tests|scripts)/")
      continue()
    endif()
    get_filename_component(header_dir "${header}" DIRECTORY)
    if(NOT header_dir IN_LIST allowed)
      string(APPEND errors "  ${file} includes ${header}\n")
    endif()
  endforeach()
endforeach()
if(errors)
  message(FATAL_ERROR "xtrain: ${ROOM} may include only from ${allowed_text} "
                      "(xtrain_room's USES in ${ROOM}/CMakeLists.txt):\n${errors}")
endif()
file(TOUCH "${STAMP}")
