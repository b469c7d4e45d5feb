# Writes a C source holding a file's bytes: cmake -DIN=file -DOUT=file.c -DNAME=symbol -P embed.cmake
# (symbol: const unsigned char NAME[] with a NUL after the bytes; const size_t NAME_len).
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" n)
math(EXPR bytes "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," arr "${hex}")
file(WRITE "${OUT}" "/* Generated from ${IN} by cmake/embed.cmake: do not edit. */\n#include <stddef.h>\n"
     "const unsigned char ${NAME}[] = {${arr}0};\nconst size_t ${NAME}_len = ${bytes};\n")
