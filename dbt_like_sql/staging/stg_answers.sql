-- One row per answer (every attempt, entry and exit quizzes), with a single correctness verdict.
-- is_correct, first rule that applies:
--   1. validation.isForcedValid is true (an admin or coach forced it valid)  -> correct
--   2. validation.feedback.status is valid / invalid (a person reviewed it)  -> correct / incorrect
--   3. validation.feedback.status is pending (review not done yet)            -> NULL (undecided)
--   4. isValid (the platform's automatic check)                               -> its value
--   5. nothing known                                                          -> NULL (undecided)
-- isForcedValid false is read as "not forced", not as "forced invalid", so it decides nothing by itself.
SELECT
    active_lesson_id,
    user_id,
    lesson_id,
    quiz_type,
    CAST(attempt_index AS BIGINT) AS attempt_index,
    question_id,
    question_title,
    lesson_version,
    last_date AS answered_at,
    start_time_stamp,
    end_time_stamp,
    is_valid,
    validation_feedback_status AS feedback_status,
    validation_feedback_title AS feedback_title,
    validation_forced_validation_type AS forced_validation_type,
    validation_is_forced_valid AS is_forced_valid,
    CASE
        WHEN validation_is_forced_valid THEN TRUE
        WHEN validation_feedback_status = 'valid' THEN TRUE
        WHEN validation_feedback_status = 'invalid' THEN FALSE
        WHEN validation_feedback_status = 'pending' THEN NULL
        ELSE is_valid
    END AS is_correct,
    CASE
        WHEN validation_is_forced_valid THEN 'forced'
        WHEN validation_feedback_status IN ('valid', 'invalid', 'pending') THEN 'feedback'
        WHEN is_valid IS NOT NULL THEN 'automatic'
        ELSE 'unknown'
    END AS correctness_basis,
    first_loaded_at,
    last_loaded_at
FROM lms.answers
