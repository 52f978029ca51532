; Shadow-engine queries for C++ (see grammars/python/shadow.scm for the captures).
(string_literal) @skip
(raw_string_literal) @skip
(char_literal) @skip
(system_lib_string) @skip
(comment) @skip
