-- One row per learner and lesson: the platform's progress record, renamed, with a derived status.
-- The ActiveLesson resource carries no status (only the callbacks do), so it is derived from its fields:
--   succeeded    stats.success is true (achieved stands in when stats.success is absent)
--   failed       not succeeded, and progress reached 100 %
--   in-progress  not succeeded, some progress
--   not-started  no progress (a lesson assigned but never opened still has a startDate: the assignment)
SELECT
    owner_id,
    user_id,
    lesson_id,
    title AS lesson_title,
    start_date AS started_at,
    last_date AS last_activity_at,
    stats_progress_in_percent AS progress_percent,
    score,
    success_rate,
    time_spent,
    stats_nb_correct_answers AS correct_answers,
    stats_nb_incorrect_answers AS incorrect_answers,
    stats_validation_threshold AS validation_threshold,
    stats_success AS is_success,
    achieved AS is_achieved,
    version AS lesson_version,
    CASE
        WHEN coalesce(stats_success, achieved, FALSE) THEN 'succeeded'
        WHEN stats_progress_in_percent >= 100 THEN 'failed'
        WHEN stats_progress_in_percent > 0 THEN 'in-progress'
        ELSE 'not-started'
    END AS status,
    first_loaded_at,
    last_loaded_at
FROM lms.active_lessons
