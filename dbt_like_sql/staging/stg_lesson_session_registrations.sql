-- Current registrations of users to lesson sessions.
with

source as (

    select * from {{ source('lms', 'lesson_session_registrations') }}

),

renamed as (

    select
        session_id,
        user_id,
        status as registration_status,
        attendance,
        registration_date as registered_at,
        signature_date as signed_at

    from source
    where deleted_at is null

)

select * from renamed
