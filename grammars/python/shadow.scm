; Shadow-engine queries for Python.
; @skip: where drafting syntax is pointless (the cursor is inside free text).
; @construct: the constructs that enclose the cursor (innermost wins).
(string) @skip
(comment) @skip

(function_definition) @construct
(class_definition) @construct
(if_statement) @construct
(for_statement) @construct
(while_statement) @construct
(with_statement) @construct
(try_statement) @construct
(dictionary) @construct
(list) @construct
(call) @construct
