; Shadow-engine queries for Rust (see grammars/python/shadow.scm for the captures).
(string_literal) @skip
(raw_string_literal) @skip
(char_literal) @skip
(line_comment) @skip
(block_comment) @skip
