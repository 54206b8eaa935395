-- Lesson funnel: for every lesson of the catalogue (and any lesson learners have progress on), how many
-- learners are at each status. started = in progress + succeeded + failed; learners = started + not started.
-- median_hours_to_success: median of (last activity - start) over succeeded learners, in hours; the
-- platform does not expose the instant of success, so the last activity of a succeeded record stands in.
WITH lessons AS (
    SELECT lesson_id FROM analytics.stg_lessons
    UNION
    SELECT lesson_id FROM analytics.learner_progress
),
counts AS (
    SELECT
        lesson_id,
        count(*) AS learners,
        count(*) FILTER (WHERE status <> 'not-started') AS started,
        count(*) FILTER (WHERE status = 'not-started') AS not_started,
        count(*) FILTER (WHERE status = 'in-progress') AS in_progress,
        count(*) FILTER (WHERE status = 'succeeded') AS succeeded,
        count(*) FILTER (WHERE status = 'failed') AS failed,
        median(epoch(last_activity_at - started_at) / 3600.0)
            FILTER (WHERE status = 'succeeded') AS median_hours_to_success,
        median(time_spent) FILTER (WHERE status = 'succeeded') AS median_time_spent_to_success
    FROM analytics.learner_progress
    GROUP BY lesson_id
)
SELECT
    s.lesson_id,
    l.lesson_title,
    l.lesson_status,
    coalesce(c.learners, 0) AS learners,
    coalesce(c.not_started, 0) AS not_started,
    coalesce(c.started, 0) AS started,
    coalesce(c.in_progress, 0) AS in_progress,
    coalesce(c.succeeded, 0) AS succeeded,
    coalesce(c.failed, 0) AS failed,
    c.succeeded / nullif(c.started, 0) AS success_rate,
    c.median_hours_to_success,
    c.median_time_spent_to_success
FROM lessons AS s
LEFT JOIN counts AS c ON c.lesson_id = s.lesson_id
LEFT JOIN analytics.stg_lessons AS l ON l.lesson_id = s.lesson_id
