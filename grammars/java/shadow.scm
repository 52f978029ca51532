; Shadow-engine queries for Java (see grammars/python/shadow.scm for the captures).
(string_literal) @skip
(character_literal) @skip
(line_comment) @skip
(block_comment) @skip
