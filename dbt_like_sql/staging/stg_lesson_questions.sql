-- Quiz questions of the catalogue: one row per question slot (lesson, notion, quiz, position).
-- question_id is not in the platform's spec; it is filled when the platform sends it (the simulator does).
SELECT
    lesson_id,
    notion_index,
    notion_title,
    quiz AS quiz_type,
    question_index,
    question_id,
    question_title,
    question_type,
    question_allowed_attempts AS allowed_attempts
FROM lms.lesson_questions
WHERE deleted_at IS NULL
