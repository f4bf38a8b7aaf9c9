-- What each workflow step was given (issue 22: a step's input and outcome
-- are recorded): a procedure's arguments, a proc's command line, a message
-- sent, an event's value, a receive's topic, a sleep's length; empty for a
-- client function, whose input is what its closure holds.
ALTER TABLE workflow_step ADD COLUMN input BLOB;
