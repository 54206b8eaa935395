-- One row per result of an answer (a chosen option, a typed text or number, a picture), current rows only.
SELECT
    active_lesson_id,
    quiz_type,
    CAST(attempt_index AS BIGINT) AS attempt_index,
    question_id,
    result_index,
    type AS result_type,
    label_name,
    value_number,
    value_text,
    position_left,
    position_top
FROM lms.answer_results
WHERE deleted_at IS NULL
